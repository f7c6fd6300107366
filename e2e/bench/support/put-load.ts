/**
 * Sustained put load against an etcd, for the delta-capture bench, in its own process so its memory and
 * CPU bookkeeping stay out of the process being measured.
 *
 *   node --import tsx e2e/bench/support/put-load.ts --endpoint=http://127.0.0.1:2379 --rate=5000 --seconds=60
 *        [--value-bytes=1024] [--concurrency=64] [--keys=50000]
 *
 * `concurrency` puts are in flight at a time, paced so no more than rate × elapsed have been issued, until
 * `seconds` have passed (so a machine that cannot reach the rate shows what it reached). Each
 * value is distinct (a counter stamped into a random-looking buffer). Prints one JSON line: puts, seconds,
 * putsPerSecond, lastRevision, errors.
 */
import { Etcd3 } from 'etcd3';

function num(name: string, fallback: number): number {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  return hit === undefined ? fallback : Number(hit.slice(name.length + 3));
}

async function main(): Promise<void> {
  const endpoint = process.argv.find((a) => a.startsWith('--endpoint='))?.slice(11);
  if (!endpoint) throw new Error('--endpoint is required');
  const rate = num('rate', 5000);
  const seconds = num('seconds', 60);
  const valueBytes = num('value-bytes', 1024);
  const concurrency = num('concurrency', 64);
  const keys = num('keys', 50_000);
  const total = Math.round(rate * seconds);
  const client = new Etcd3({ hosts: endpoint });
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
  let lastRevision = 0;
  const t0 = Date.now();
  const deadline = t0 + seconds * 1000;
  let lastReport = t0;
  const worker = async (): Promise<void> => {
    // Stops at the deadline even if the rate was not reached (the machine may be too slow for it).
    while (issued < total && Date.now() < deadline) {
      const allowed = ((Date.now() - t0) / 1000) * rate;
      if (issued >= allowed) {
        await new Promise((r) => setTimeout(r, Math.max(1, Math.ceil(((issued - allowed) / rate) * 1000))));
        continue;
      }
      const n = issued++;
      const value = Buffer.from(template);
      value.write(String(n).padStart(12, '0'), 0, 'latin1');
      try {
        // The RPC layer directly: the builder API costs CPU per put that this 2-core machine needs for etcd.
        const res = await client.kv.put({ key: Buffer.from(`/registry/load/key-${String(n % keys).padStart(6, '0')}`), value });
        const rev = Number(res.header.revision);
        if (rev > lastRevision) lastRevision = rev;
        done++;
      } catch {
        errors++;
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
    client.close();
  }
  const secs = (Date.now() - t0) / 1000;
  console.log(JSON.stringify({ puts: done, seconds: secs, putsPerSecond: Math.round(done / secs), lastRevision, errors }));
}

await main();
