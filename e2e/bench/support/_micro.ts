import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CompressStream } from 'zstd-napi';
import { FullSnapshotVerifier } from '../../../src/backup/full-verify.js';
const data = readFileSync('/tmp/mywork/snap.db');
const CH = Number(process.env.CH ?? 32768);
function* chunks() { for (let i = 0; i < data.length; i += CH) yield Buffer.from(data.subarray(i, i + CH)); }
const sink = () => new Writable({ highWaterMark: 65536, write(_c, _e, cb) { cb(); } });
async function t(name: string, f: () => Promise<void> | void) {
  const c0 = process.cpuUsage(); const t0 = performance.now(); await f(); const c = process.cpuUsage(c0);
  console.log(name.padEnd(24), ((performance.now() - t0) / 1000).toFixed(2), 's wall', ((c.user + c.system) / 1e6).toFixed(2), 's cpu', (data.length / 1048576 / ((c.user + c.system) / 1e6)).toFixed(0), 'MiB/cpu-s');
}
for (let rep = 0; rep < 2; rep++) {
await t('copy chunks only', async () => { for (const _ of chunks()); });
await t('readable->sink', () => pipeline(Readable.from(chunks()), sink()));
await t('sha256 raw', () => { const h = createHash('sha256'); for (const c of chunks()) h.update(c); h.digest(); });
await t('verifier', () => pipeline(Readable.from(chunks()), new FullSnapshotVerifier(), sink()));
for (const lvl of [1, 3]) await t(`zstd-${lvl}`, () => pipeline(Readable.from(chunks()), new CompressStream({ compressionLevel: lvl, checksumFlag: true }), sink()));
}
