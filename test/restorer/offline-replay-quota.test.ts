/**
 * The offline replay under the quota rule (src/restorer/offline-replay.ts, quota-rule.ts): without a compaction
 * asked for, the backend is written while the deltas are still arriving, and written again compacted when a
 * delta makes the chain pass 80 % of the quota. Either way the result must be the backend of the replay that
 * fetched every delta first and decided then: byte for byte the same file. Every delta file is removed at the
 * end, the deltas' source is read to its end (or closed on a failure), never closed early.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newSnapshot, silentLogger } from '@etcdbrctl/snapstore';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { BoltWriter } from '../../src/bbolt/writer.js';
import { KEY_BUCKET, META_BUCKET } from '../../src/backend/schema.js';
import type { FetchedDelta } from '../../src/restorer/fetch.js';
import { encodePutValue, revisionKey } from '../../src/restorer/mvcc.js';
import { InconsistentDeltaError, replayDeltasOffline, type OfflineReplayInput } from '../../src/restorer/offline-replay.js';
import { QUOTA_COMPACT_RATIO } from '../../src/restorer/quota-rule.js';

const BASE_REVISION = 2;
const TIME = '2026-11-28T00:00:00Z';
const DELTAS = 6;
const PER_DELTA = 40;
const TARGET = BASE_REVISION + DELTAS * PER_DELTA;

let dir: string;
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'etcdbr-offline-quota-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A base backend holding `/k0` put at revision 2, as the checks test writes it. */
async function baseBackend(): Promise<string> {
  const file = join(dir, `db-${n++}`);
  const w = await BoltWriter.create(file, { pageSize: 4096, txid: 3 });
  const key = Buffer.from('/k0');
  await w.writeBucket(KEY_BUCKET, [
    {
      key: revisionKey(BASE_REVISION, 0, false),
      value: encodePutValue({ key, createRevision: 2, modRevision: 2, version: 1, value: Buffer.from('base') }),
    },
  ]);
  await w.writeBucket(META_BUCKET, [{ key: Buffer.from('consistent_index'), value: Buffer.alloc(8) }]);
  await w.finish();
  return file;
}

/**
 * One event per revision after the base over eight keys: puts and overwrites with values of a few hundred
 * bytes, and every seventh revision a delete of a live key (so the compaction has tombstones and old
 * revisions to remove). `corruptAt`: that revision's put carries a version etcd would not have written.
 */
function chainEvents(corruptAt?: number): DeltaEvent[] {
  const live = new Map<string, { create: number; version: number }>([['/k0', { create: 2, version: 1 }]]);
  const out: DeltaEvent[] = [];
  for (let rev = BASE_REVISION + 1; rev <= TARGET; rev++) {
    const name = `/k${(rev * 5) % 8}`;
    const key = Buffer.from(name);
    const state = live.get(name);
    if (rev % 7 === 0 && state) {
      live.delete(name);
      out.push({ type: 'DELETE', key, value: Buffer.alloc(0), createRevision: 0, modRevision: rev, version: 0, lease: '0', time: TIME });
      continue;
    }
    const next = state ? { create: state.create, version: state.version + 1 } : { create: rev, version: 1 };
    live.set(name, next);
    out.push({
      type: 'PUT',
      key,
      value: Buffer.alloc(200 + ((rev * 37) % 300), rev % 256),
      createRevision: next.create,
      modRevision: rev,
      version: rev === corruptAt ? next.version + 5 : next.version,
      lease: '0',
      time: TIME,
    });
  }
  return out;
}

/** The chain as payload files (JSON array ‖ sha256), the way the fetch leaves them. */
async function deltaFiles(evs: DeltaEvent[]): Promise<FetchedDelta[]> {
  const out: FetchedDelta[] = [];
  for (let i = 0; i < DELTAS; i++) {
    const part = evs.slice(i * PER_DELTA, (i + 1) * PER_DELTA);
    const json = Buffer.from(`[${part.map(encodeDeltaEvent).join(',')}]`);
    const file = join(dir, `delta-${n++}`);
    await writeFile(file, Buffer.concat([json, createHash('sha256').update(json).digest()]));
    const snap = newSnapshot({
      kind: 'Incr',
      startRevision: part[0]!.modRevision,
      lastRevision: part.at(-1)!.modRevision,
      createdOn: new Date('2026-11-28T00:00:00Z'),
    });
    out.push({ snap, file });
  }
  return out;
}

/** The deltas as a fetch hands them out (one at a time, asynchronously), with what the reader did to it. */
function source(deltas: FetchedDelta[]): { deltas: AsyncIterable<FetchedDelta>; seen: { handedOut: number; closed: boolean } } {
  const seen = { handedOut: 0, closed: false };
  async function* gen(): AsyncGenerator<FetchedDelta> {
    try {
      for (const d of deltas) {
        await new Promise((r) => setImmediate(r));
        seen.handedOut++;
        yield d;
      }
    } finally {
      seen.closed = true;
    }
  }
  return { deltas: gen(), seen };
}

async function replayed(
  over: Partial<OfflineReplayInput> & Pick<OfflineReplayInput, 'deltas'>,
): Promise<{ bytes: Buffer; compactRevision?: number }> {
  const dbPath = await baseBackend();
  const r = await replayDeltasOffline({ dbPath, targetRevision: TARGET, logger: silentLogger, ...over });
  expect(r.revision).toBe(TARGET);
  return { bytes: await readFile(dbPath), ...(r.compactRevision !== undefined ? { compactRevision: r.compactRevision } : {}) };
}

/** A quota whose 80 % the base and the first `deltas` delta files pass, and the first `deltas - 1` do not. */
async function quotaPassedAt(base: string, files: FetchedDelta[], deltas: number): Promise<number> {
  let bytes = (await stat(base)).size;
  for (const f of files.slice(0, deltas)) bytes += (await stat(f.file)).size;
  // Just below `bytes` once the ratio is applied: passed by the whole prefix, not by one delta less.
  return Math.floor((bytes - 1) / QUOTA_COMPACT_RATIO);
}

describe('offline replay under the quota rule', () => {
  it('a chain that never passes the quota: the backend of a replay without the rule, files removed, source read to its end', async () => {
    const evs = chainEvents();
    const expected = await replayed({ deltas: await deltaFiles(evs) });
    const files = await deltaFiles(evs);
    const src = source(files);
    const got = await replayed({ deltas: src.deltas, quotaRule: { quotaBytes: 8 * 1024 ** 3, baseBytes: 4096 } });
    expect(got.compactRevision).toBeUndefined();
    expect(got.bytes.equals(expected.bytes)).toBe(true);
    expect(src.seen).toEqual({ handedOut: DELTAS, closed: true });
    for (const f of files) expect(existsSync(f.file)).toBe(false);
  });

  it.each([1, 3, DELTAS])(
    'a chain that passes the quota at delta %i: the compacted backend of a replay that fetched everything first',
    async (at) => {
      const evs = chainEvents();
      // The oracle: every delta on disk before writing, the compaction at the newest revision decided up front.
      const expected = await replayed({ deltas: await deltaFiles(evs), compactRevision: TARGET });
      expect(expected.compactRevision).toBe(TARGET);
      const files = await deltaFiles(evs);
      const baseBytes = (await stat(await baseBackend())).size;
      const quotaBytes = await quotaPassedAt(await baseBackend(), files, at);
      const src = source(files);
      const got = await replayed({ deltas: src.deltas, quotaRule: { quotaBytes, baseBytes } });
      expect(got.compactRevision).toBe(TARGET);
      expect(got.bytes.equals(expected.bytes)).toBe(true);
      // The rest of the chain came from the same source after the pass: none fetched twice, none lost.
      expect(src.seen).toEqual({ handedOut: DELTAS, closed: true });
      for (const f of files) expect(existsSync(f.file)).toBe(false);
    },
  );

  it('a failure while writing as the deltas arrive closes the source and removes every delta file', async () => {
    const files = await deltaFiles(chainEvents(BASE_REVISION + PER_DELTA + 5));
    const src = source(files);
    const dbPath = await baseBackend();
    const before = await readFile(dbPath);
    await expect(
      replayDeltasOffline({
        dbPath,
        deltas: src.deltas,
        targetRevision: TARGET,
        logger: silentLogger,
        quotaRule: { quotaBytes: 8 * 1024 ** 3, baseBytes: 4096 },
      }),
    ).rejects.toBeInstanceOf(InconsistentDeltaError);
    expect(src.seen.closed).toBe(true);
    expect(src.seen.handedOut).toBeLessThan(DELTAS);
    // Those handed out are the replay's to remove (the source removes what it holds itself, as the fetch does).
    for (const f of files.slice(0, src.seen.handedOut)) expect(existsSync(f.file)).toBe(false);
    // The base backend is left as it was, and no new one beside it.
    expect((await readFile(dbPath)).equals(before)).toBe(true);
    expect(existsSync(`${dbPath}.offline-replay`)).toBe(false);
  });
});
