/**
 * The HashKV the drill computes from `key` bucket entries equals etcd's own Maintenance.HashKV, on etcd 3.4
 * (the machine's) and 3.5: at every revision of a history with overwrites, deletes, transactions, leased keys
 * and a lease revocation, before any compaction (compact revision -1), after a compaction at a revision whose
 * op is a delete (3.5.16 keeps that tombstone and skips it in the hash) and after a second one, at revisions
 * where no key is live (etcd's keep set is empty: it filters nothing below the compaction), and from the
 * entries of etcd's own snapshot database. The entries are built from the watch's events, as the drill builds
 * them from delta snapshots (KeyValue bytes with the lease); etcd computes its hash from its bbolt file.
 */
import { createWriteStream } from 'node:fs';
import { stat, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { Cursor } from '../../src/bbolt/cursor.js';
import { BoltDB } from '../../src/bbolt/db.js';
import type { EtcdClient } from '../../src/etcd/index.js';
import { KEY_BUCKET } from '../../src/backend/schema.js';
import { KeepIndex, KvHasher } from '../../src/verifier/kv-hash.js';
import { emptyRecord, recordOfEntry, recordOfEvent, type KvRecord } from '../../src/verifier/kv-record.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { etcdClient } from '../support/etcd-client.js';
import { etcd35Binaries, etcdBinaries, startTestEtcd } from '../support/etcd.js';
import { deleteAll, writeHistory } from '../support/hash-history.js';
import { waitFor } from '../support/wait.js';

const cleanups = cleanupAfterEach();

/** Every entry the events stand for, in revision order (the sub revision is the op's index in its revision). */
function entriesOf(events: readonly DeltaEvent[]): KvRecord[] {
  let sub = 0;
  let last = 0;
  return events.map((ev) => {
    sub = ev.modRevision === last ? sub + 1 : 0;
    last = ev.modRevision;
    return recordOfEvent(ev, sub, emptyRecord());
  });
}

/** The drill's hashes of `entries` at `revisions` for compaction revision `compactRevision`. */
function hashesOf(entries: readonly KvRecord[], compactRevision: number, revisions: number[]): number[] {
  let keep: KeepIndex | undefined;
  if (compactRevision > 0) {
    keep = new KeepIndex(compactRevision, revisions.at(-1)!);
    for (const e of entries) keep.feed(e);
    keep.finish();
  }
  const hasher = new KvHasher(compactRevision, revisions, keep);
  for (const e of entries) hasher.feed(e);
  return hasher.hashes();
}

/** etcd's HashKV at each revision from `from` to `to`, and the drill's for the compaction revision etcd answers with. */
async function compareRange(client: EtcdClient, entries: readonly KvRecord[], from: number, to: number): Promise<void> {
  const rows: Array<{ revision: number; compactRevision: number; etcd: number; ours: number }> = [];
  for (let m = from; m <= to; m++) {
    const a = await client.hashKv(m);
    const [ours] = hashesOf(entries, a.compactRevision, [m]);
    rows.push({ revision: m, compactRevision: a.compactRevision, etcd: a.hash, ours: ours! });
  }
  expect(rows.filter((r) => r.etcd !== r.ours)).toEqual([]);
  expect(rows.length).toBe(to - from + 1);
}

/** Collects every event from revision 1 on; `upTo(rev)` waits until the watch delivered everything up to `rev`. */
async function recordEvents(client: EtcdClient): Promise<{ events: DeltaEvent[]; upTo: (rev: number) => Promise<void> }> {
  const events: DeltaEvent[] = [];
  const watch = await client.watchAllKeys(1, {
    onEvents: (evs) => {
      for (const e of evs) events.push({ ...e, key: Buffer.from(e.key), value: Buffer.from(e.value) });
    },
    onError: () => undefined,
  });
  cleanups.push(() => watch.close());
  return {
    events,
    upTo: (rev) => waitFor(() => (events.at(-1)?.modRevision ?? 0) >= rev, `the watch up to revision ${rev}`).then(() => undefined),
  };
}

describe.each([
  ['3.4', etcdBinaries],
  ['3.5', etcd35Binaries],
])('the drill computes HashKV as etcd %s does', (_line, binaries) => {
  it('at every revision, before and after compactions (one at a delete), with leases, transactions and no key live', async () => {
    const etcd = await startTestEtcd({ binaries: await binaries() });
    cleanups.push(() => etcd.cleanup());
    const raw = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(() => Promise.resolve(raw.close()));
    const client = etcdClient(etcd.clientUrl);
    cleanups.push(() => Promise.resolve(client.close()));
    const { events, upTo } = await recordEvents(client);

    const first = await writeHistory(raw, '/h/', 2);
    let head = first.at(-1)!;
    await upTo(head);
    expect((await client.hashKv(head)).compactRevision).toBe(-1);
    await compareRange(client, entriesOf(events), 1, head);

    // A compaction at a delete (round 0's delete of `empty`, its 14th step): 3.5.16 keeps that tombstone.
    const atDelete = first[13]!;
    await client.compact(atDelete);
    const more = await writeHistory(raw, '/i/', 1);
    head = more.at(-1)!;
    await upTo(head);
    // 3.4 refuses HashKV at the compaction revision itself; 3.5 answers it (with the hash its compaction stored).
    const lowest = _line === '3.4' ? atDelete + 1 : atDelete;
    await compareRange(client, entriesOf(events), lowest, head);

    // No key live at the head: etcd's keep set is empty and it hashes what it holds below the compaction.
    const gone = await deleteAll(raw, '/');
    await upTo(gone);
    await compareRange(client, entriesOf(events), gone - 2, gone);
    const again = Number((await raw.kv.put({ key: Buffer.from('/j/after'), value: Buffer.from('x') })).header.revision);
    await client.compact(more[4]!);
    await upTo(again);
    await compareRange(client, entriesOf(events), more[4]! + 1, again);
  }, 120_000);

  it("from the entries of etcd's own snapshot database, compacted", async () => {
    const etcd = await startTestEtcd({ binaries: await binaries() });
    cleanups.push(() => etcd.cleanup());
    const raw = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(() => Promise.resolve(raw.close()));
    const client = etcdClient(etcd.clientUrl);
    cleanups.push(() => Promise.resolve(client.close()));
    const revs = await writeHistory(raw, '/s/', 3);
    await client.compact(revs[20]!);
    const head = revs.at(-1)!;

    const dir = await cleanups.tempDir('etcdbr-kv-hash-');
    const file = join(dir, 'snap.db');
    const stream = await client.snapshot();
    await pipeline(
      Readable.from(
        (async function* () {
          for await (const c of stream) yield c.blob;
        })(),
      ),
      createWriteStream(file),
    );
    await truncate(file, (await stat(file)).size - 32);
    const db = await BoltDB.open(file);
    const entries: KvRecord[] = [];
    try {
      for await (const e of new Cursor(db, (await db.bucket(KEY_BUCKET))!)) {
        entries.push(recordOfEntry(Buffer.from(e.key), Buffer.from(e.value), emptyRecord(), 'snapshot'));
      }
    } finally {
      await db.close();
    }
    const a = await client.hashKv(head);
    expect(a.compactRevision).toBe(revs[20]);
    expect(hashesOf(entries, a.compactRevision, [head])).toEqual([a.hash]);
  }, 60_000);
});
