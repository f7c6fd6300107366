/**
 * Sustained put load against an etcd, for the delta-capture bench, in its own process so its memory and
 * CPU bookkeeping stay out of the process being measured.
 *
 *   node --import tsx e2e/bench/support/put-load.ts --endpoint=http://127.0.0.1:2379 --rate=5000 --seconds=60
 *        [--value-bytes=1024] [--concurrency=64] [--keys=50000]
 *
 * `concurrency` puts are in flight at a time, paced so no more than rate × elapsed have been issued, until
 * `seconds` have passed (so a machine that cannot reach the rate shows what it reached). Each put is its
 * own request and so its own revision, as the kube-apiserver's writes are. Each value is distinct (a
 * counter stamped into a random-looking buffer). Prints one JSON line: puts, seconds, putsPerSecond,
 * lastRevision, errors.
 *
 * Why raw gRPC and not the etcd3 client: through etcd3 (even its RPC layer) one put cost this process
 * about 300 µs of CPU, nearly four times what etcd itself spends on it (about 85 µs), and through
 * node:http2 still about 130 µs, so on a 2-core machine the generator, not etcd or the sidecar, capped
 * the load. A put here is one HTTP/2 stream of our own minimal client (src/etcd/lean-h2.ts) carrying a
 * hand-encoded `etcdserverpb.PutRequest` (key = field 1, value = field 2) and a `PutResponse` whose
 * header revision (field 1 → field 3) is read back.
 */
import { LeanH2 } from '../../../src/etcd/lean-h2.js';
import { putFrame } from '../../../test/support/put-frame.js';
import type { PutLoadResult } from './put-load-result.js';

const PUT_PATH = '/etcdserverpb.KV/Put';

function num(name: string, fallback: number): number {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  return hit === undefined ? fallback : Number(hit.slice(name.length + 3));
}

interface Field {
  no: number;
  wire: number;
  value: number;
  bytes?: Buffer;
}

/** The fields of one protobuf message: varints as numbers (revisions fit in 2^53), length-delimited as bytes. */
function* fields(buf: Buffer): Generator<Field> {
  let pos = 0;
  const readVarint = (): number => {
    let result = 0;
    let scale = 1;
    for (;;) {
      if (pos >= buf.length) throw new Error('truncated varint in PutResponse');
      const b = buf[pos++]!;
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
  };
  while (pos < buf.length) {
    const tag = readVarint();
    const no = Math.floor(tag / 8);
    const wire = tag & 7;
    if (wire === 0) {
      yield { no, wire, value: readVarint() };
    } else if (wire === 2) {
      const len = readVarint();
      const bytes = buf.subarray(pos, pos + len);
      pos += len;
      yield { no, wire, value: len, bytes };
    } else if (wire === 1) {
      pos += 8;
    } else if (wire === 5) {
      pos += 4;
    } else {
      throw new Error(`unexpected protobuf wire type ${wire} in PutResponse`);
    }
  }
}

/** PutResponse.header.revision from one gRPC response body (5-byte prefix + message). */
function revisionOf(response: Buffer): number {
  if (response.length < 5) throw new Error(`short gRPC response (${response.length} bytes)`);
  for (const header of fields(response.subarray(5))) {
    if (header.no !== 1 || header.bytes === undefined) continue;
    for (const f of fields(header.bytes)) if (f.no === 3 && f.wire === 0) return f.value;
  }
  throw new Error('PutResponse without a header revision');
}

async function put(client: LeanH2, frame: Buffer): Promise<number> {
  return revisionOf(await client.call(PUT_PATH, frame));
}

async function main(): Promise<void> {
  const endpoint = process.argv.find((a) => a.startsWith('--endpoint='))?.slice(11);
  if (!endpoint) throw new Error('--endpoint is required');
  if (!endpoint.startsWith('http://')) throw new Error(`--endpoint must be plain http://, got ${endpoint}`);
  const rate = num('rate', 5000);
  const seconds = num('seconds', 60);
  const valueBytes = num('value-bytes', 1024);
  const concurrency = num('concurrency', 64);
  const keys = num('keys', 50_000);
  const total = Math.round(rate * seconds);
  const client = await LeanH2.connect(endpoint, {
    onError: (err) => process.stderr.write(`  load: connection error: ${err.message}\n`),
  });
  const template = Buffer.alloc(valueBytes);
  let x = 0x9e3779b9;
  for (let i = 0; i < valueBytes; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    template[i] = 0x21 + ((x >>> 0) % 90);
  }
  let issued = 0;
  let done = 0;
  let errors = 0;
  let firstError: string | undefined;
  let lastRevision = 0;
  const t0 = Date.now();
  const deadline = t0 + seconds * 1000;
  let lastReport = t0;
  const worker = async (): Promise<void> => {
    // Stops at the deadline even if the rate was not reached (the machine may be too slow for it).
    while (issued < total && Date.now() < deadline) {
      // Each put has a due time (n / rate after the start); a worker claims the next one and sleeps once
      // until it is due, instead of polling (64 workers polling on 1 ms timers cost more than the puts).
      const n = issued++;
      const wait = t0 + (n / rate) * 1000 - Date.now();
      if (wait >= 1) await new Promise((r) => setTimeout(r, wait));
      if (Date.now() >= deadline) break;
      const value = Buffer.from(template);
      value.write(String(n).padStart(12, '0'), 0, 'latin1');
      const key = Buffer.from(`/registry/load/key-${String(n % keys).padStart(6, '0')}`);
      try {
        const rev = await put(client, putFrame(key, value));
        if (rev > lastRevision) lastRevision = rev;
        done++;
      } catch (err) {
        errors++;
        firstError ??= (err as Error).message;
      }
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        process.stderr.write(`  load: ${done} puts, ${Math.round(done / ((lastReport - t0) / 1000))} puts/s\n`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    await client.close();
  }
  if (firstError !== undefined) process.stderr.write(`  load: ${errors} errors, the first: ${firstError}\n`);
  const secs = (Date.now() - t0) / 1000;
  const result: PutLoadResult = { puts: done, seconds: secs, putsPerSecond: Math.round(done / secs), lastRevision, errors };
  console.log(JSON.stringify(result));
}

await main();
