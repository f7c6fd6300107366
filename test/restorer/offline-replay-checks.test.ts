/**
 * The offline replay's per-key checks (src/restorer/offline-replay.ts with key-states.ts): each event's create
 * revision and version must be what etcd would have written after what the replay wrote before for that key,
 * else InconsistentDeltaError (on which `auto` goes online). The base backend is written with our bbolt writer
 * (a `key` bucket holding one put, a `meta` bucket), the deltas are payload files as the fetch leaves them.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newSnapshot, silentLogger } from '@etcdbrctl/snapstore';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { BoltWriter } from '../../src/bbolt/writer.js';
import { KEY_BUCKET, META_BUCKET } from '../../src/backend/schema.js';
import { encodePutValue, revisionKey } from '../../src/restorer/mvcc.js';
import type { FetchedDelta } from '../../src/restorer/fetch.js';
import { InconsistentDeltaError, replayDeltasOffline } from '../../src/restorer/offline-replay.js';

/** The base holds `/base` put at revision 2 (create 2, version 1). */
const BASE_REVISION = 2;
const TIME = '2026-11-27T00:00:00Z';

let dir: string;
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'etcdbr-offline-checks-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function baseBackend(): Promise<string> {
  const file = join(dir, `db-${n++}`);
  const w = await BoltWriter.create(file, { pageSize: 4096, txid: 3 });
  const key = Buffer.from('/base');
  await w.writeBucket(KEY_BUCKET, [
    {
      key: revisionKey(BASE_REVISION, 0, false),
      value: encodePutValue({ key, createRevision: 2, modRevision: 2, version: 1, value: Buffer.from('v') }),
    },
  ]);
  await w.writeBucket(META_BUCKET, [{ key: Buffer.from('consistent_index'), value: Buffer.alloc(8) }]);
  await w.finish();
  return file;
}

type Op = ['put', string, number, number] | ['del', string];

/** One event per revision from BASE_REVISION + 1: a put with (create revision, version), or a delete. */
function events(ops: Op[]): DeltaEvent[] {
  return ops.map((op, i) => {
    const modRevision = BASE_REVISION + 1 + i;
    const key = Buffer.from(op[1]);
    return op[0] === 'put'
      ? { type: 'PUT', key, value: Buffer.from(`v${i}`), createRevision: op[2], modRevision, version: op[3], lease: '0', time: TIME }
      : { type: 'DELETE', key, value: Buffer.alloc(0), createRevision: 0, modRevision, version: 0, lease: '0', time: TIME };
  });
}

/** The events as one delta payload file (JSON array ‖ sha256), the way the fetch leaves it. */
async function delta(evs: DeltaEvent[]): Promise<FetchedDelta> {
  const json = Buffer.from(`[${evs.map(encodeDeltaEvent).join(',')}]`);
  const file = join(dir, `delta-${n++}`);
  await writeFile(file, Buffer.concat([json, createHash('sha256').update(json).digest()]));
  const snap = newSnapshot({
    kind: 'Incr',
    startRevision: evs[0]!.modRevision,
    lastRevision: evs.at(-1)!.modRevision,
    createdOn: new Date('2026-11-27T00:00:00Z'),
  });
  return { snap, file };
}

async function replay(ops: Op[]) {
  const evs = events(ops);
  return replayDeltasOffline({
    dbPath: await baseBackend(),
    deltas: [await delta(evs)],
    targetRevision: evs.at(-1)!.modRevision,
    logger: silentLogger,
  });
}

describe('offline replay: per-key create revision and version checks', () => {
  it('accepts a history etcd writes: creates, overwrites, a delete and a re-create, and a key of the base continued', async () => {
    const r = await replay([
      ['put', '/a', 3, 1],
      ['put', '/a', 3, 2],
      ['put', '/b', 5, 1],
      ['del', '/a'],
      ['put', '/a', 7, 1],
      ['put', '/base', 2, 2],
      ['put', '/a', 7, 2],
    ]);
    expect(r.revision).toBe(BASE_REVISION + 7);
    expect(r.revisionsApplied).toBe(7);
  });

  it('refuses a put of a live key as a fresh create (version 1 at its own revision)', async () => {
    await expect(
      replay([
        ['put', '/a', 3, 1],
        ['put', '/b', 4, 1],
        ['put', '/a', 5, 1],
      ]),
    ).rejects.toThrow(/revision 5 puts key "\/a" with create revision 5 and version 1/);
  });

  it('refuses a put of a live key with a skipped version or another create revision', async () => {
    await expect(
      replay([
        ['put', '/a', 3, 1],
        ['put', '/a', 3, 3],
      ]),
    ).rejects.toBeInstanceOf(InconsistentDeltaError);
    await expect(
      replay([
        ['put', '/a', 3, 1],
        ['put', '/a', 2, 2],
      ]),
    ).rejects.toBeInstanceOf(InconsistentDeltaError);
  });

  it('refuses a delete of a key this replay deleted, and a put after a delete that is not a create', async () => {
    await expect(
      replay([
        ['put', '/a', 3, 1],
        ['del', '/a'],
        ['del', '/a'],
      ]),
    ).rejects.toThrow(/revision 5 deletes key "\/a", which is already deleted/);
    await expect(
      replay([
        ['put', '/a', 3, 1],
        ['del', '/a'],
        ['put', '/a', 3, 2],
      ]),
    ).rejects.toBeInstanceOf(InconsistentDeltaError);
  });

  it('keeps every key apart past the first rows it allocates (5,000 keys, each written twice)', async () => {
    const keys = 5000;
    const ops: Op[] = [];
    for (let i = 0; i < keys; i++) ops.push(['put', `/k/${i}`, BASE_REVISION + 1 + i, 1]);
    for (let i = 0; i < keys; i++) ops.push(['put', `/k/${i}`, BASE_REVISION + 1 + i, 2]);
    expect((await replay(ops)).revisionsApplied).toBe(2 * keys);
    // The same chain with one late key's second put naming its neighbour's create revision.
    ops[keys + 4321] = ['put', '/k/4321', BASE_REVISION + 1 + 4322, 2];
    await expect(replay(ops)).rejects.toThrow(/puts key "\/k\/4321" with create revision 4325 and version 2/);
  });
});
