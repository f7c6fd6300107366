/**
 * age encryption throughput: our streams (typage makes and opens the header, OpenSSL's ChaCha20-Poly1305
 * seals the payload: snapstore/src/age-stream.ts) against the age library doing everything itself (its
 * pure-JavaScript payload cipher, through its web-stream API), both ways.
 *
 *   npm run bench -- [--compiled] age [-- --mib=256 --reps=3]
 *
 * encrypt  ~--mib MiB of incompressible bytes in 32 KiB writes (the size etcd's snapshot stream delivers),
 *          into a sink that counts and drops
 * decrypt  the same amount, read from an age file on disk (as a restore from a Local store does)
 * Ours and the library's runs alternate, so load drift on a shared machine hits both alike; each figure is
 * the best of --reps, after an unmeasured warm-up of each. Ratios by wall clock and by CPU seconds (steadier on a busy machine); RSS growth is
 * the peak over the RSS after a GC before the run. The last line is JSON.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable, type Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Decrypter, Encrypter, generateX25519Identity, identityToRecipient } from 'age-encryption';
import { createDecryptStream, createEncryptStream, type AgeIdentity } from '../../snapstore/src/encryption.js';
import { MiB, arg, measured, round1, round3, table, type Run } from './support/measure.js';

const WRITE = 32 * 1024;

/** Incompressible bytes (what compressed snapshot data looks like), from a 4 MiB pool. */
function* plaintext(total: number): Generator<Buffer> {
  const pool = Buffer.allocUnsafe(4 * MiB);
  let x = 0x12345678;
  for (let i = 0; i < pool.length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    pool.writeInt32LE(x | 0, i);
  }
  for (let sent = 0; sent < total; sent += WRITE) {
    const off = sent % pool.length;
    yield pool.subarray(off, off + Math.min(WRITE, total - sent));
  }
}

function sink(): Writable {
  return new Writable({
    write(_chunk: Buffer, _enc, cb) {
      cb();
    },
  });
}

/** The library's web-stream encryption as a Node Duplex-like pair of stages. */
async function libraryEncrypt(source: Readable, recipient: string): Promise<Readable> {
  const encrypter = new Encrypter();
  encrypter.addRecipient(recipient);
  const out = await encrypter.encrypt(Readable.toWeb(source) as ReadableStream<Uint8Array>);
  return Readable.fromWeb(out as import('node:stream/web').ReadableStream<Uint8Array>);
}

async function libraryDecrypt(source: Readable, identity: string): Promise<Readable> {
  const decrypter = new Decrypter();
  decrypter.addIdentity(identity);
  const out = await decrypter.decrypt(Readable.toWeb(source) as ReadableStream<Uint8Array>);
  return Readable.fromWeb(out as import('node:stream/web').ReadableStream<Uint8Array>);
}

type Case = 'encrypt/ours' | 'encrypt/library' | 'decrypt/ours' | 'decrypt/library';

async function main(): Promise<void> {
  const total = arg('mib', 256) * MiB;
  const reps = arg('reps', 3);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'age-bench-'));
  try {
    const secretKey = await generateX25519Identity();
    const identity: AgeIdentity = { secretKey, recipient: await identityToRecipient(secretKey), source: 'bench' };
    const file = path.join(dir, 'data.age');
    await pipeline(Readable.from(plaintext(total)), createEncryptStream([identity.recipient]), createWriteStream(file));

    let size = 8 * MiB; // the warm-up round (JIT, allocator) is not measured
    const cases: Record<Case, () => Promise<void>> = {
      'encrypt/ours': () => pipeline(Readable.from(plaintext(size)), createEncryptStream([identity.recipient]), sink()),
      'encrypt/library': async () => pipeline(await libraryEncrypt(Readable.from(plaintext(size)), identity.recipient), sink()),
      'decrypt/ours': () => pipeline(createReadStream(file), createDecryptStream([identity], 'data.age') as Duplex, sink()),
      'decrypt/library': async () => pipeline(await libraryDecrypt(createReadStream(file), secretKey), sink()),
    };
    const best = new Map<Case, Run>();
    for (const name of Object.keys(cases) as Case[]) await cases[name]();
    size = total;
    for (let rep = 1; rep <= reps; rep++) {
      for (const name of Object.keys(cases) as Case[]) {
        const { run } = await measured(cases[name]);
        console.log(
          `  rep ${rep}/${reps} ${name.padEnd(16)} ${run.seconds.toFixed(2)} s, cpu ${run.cpuSeconds.toFixed(2)} s, RSS +${round1(run.peakRssMB - run.baselineRssMB)} MiB`,
        );
        const prev = best.get(name);
        best.set(name, {
          ...run,
          seconds: Math.min(run.seconds, prev?.seconds ?? Infinity),
          cpuSeconds: Math.min(run.cpuSeconds, prev?.cpuSeconds ?? Infinity),
          peakRssMB: Math.max(run.peakRssMB - run.baselineRssMB, prev?.peakRssMB ?? 0),
        });
      }
    }
    const mib = total / MiB;
    const rows = [...best].map(([name, r]) => [
      name,
      round3(r.seconds),
      round1(mib / r.seconds),
      round3(r.cpuSeconds),
      round1(mib / r.cpuSeconds),
      r.peakRssMB,
    ]);
    console.log(table(['case', 'best s', 'MiB/s', 'best cpu s', 'MiB/cpu-s', 'max RSS growth MiB'], rows));
    const ratio = (a: Case, b: Case, key: 'seconds' | 'cpuSeconds'): number => round3(best.get(b)![key] / best.get(a)![key]);
    const speedups = {
      encryptWall: ratio('encrypt/ours', 'encrypt/library', 'seconds'),
      encryptCpu: ratio('encrypt/ours', 'encrypt/library', 'cpuSeconds'),
      decryptWall: ratio('decrypt/ours', 'decrypt/library', 'seconds'),
      decryptCpu: ratio('decrypt/ours', 'decrypt/library', 'cpuSeconds'),
    };
    console.log(`ours is ${speedups.encryptCpu}x the library by CPU time encrypting, ${speedups.decryptCpu}x decrypting`);
    console.log(JSON.stringify({ bench: 'age', mib, reps, results: Object.fromEntries(best), speedups }));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
