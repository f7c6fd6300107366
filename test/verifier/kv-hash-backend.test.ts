/**
 * The drill's HashKV of a hand-built backend equals etcd's own: a bbolt file written entry by entry (revision
 * keys, KeyValue bytes with leases, tombstones, several ops in one revision, overwrites) with a scheduled
 * compaction in `meta`, restored with etcd's own `snapshot restore` and started: etcd finishes the compaction
 * on start (removing what it removes from its backend), and its HashKV at every revision from the compaction
 * to the head equals the drill's over all the entries written (the drill filters what etcd removed). On etcd
 * 3.4 (the machine's) and 3.5.
 */
import { createHash } from 'node:crypto';
import { appendFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BoltWriter, type WriterEntry } from '../../src/bbolt/writer.js';
import { restoreBaseSnapshot } from '../../src/restorer/base-restore.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { freePort } from '../../src/etcd/ports.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { KEY_BUCKET, META_BUCKET, SCHEDULED_COMPACT_REV_KEY, revisionKey } from '../../src/backend/schema.js';
import { KeepIndex, KvHasher } from '../../src/verifier/kv-hash.js';
import { emptyRecord, recordOfEntry, type KvRecord } from '../../src/verifier/kv-record.js';
import { encodePutValue, encodeTombstoneValue } from '../../src/restorer/mvcc.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { etcdClient } from '../support/etcd-client.js';
import { etcd35Binaries, etcdBinaries } from '../support/etcd.js';

const cleanups = cleanupAfterEach();

/** 120 revisions over 9 keys: puts (every third with a lease), deletes, and revisions of two or three ops. */
function history(): WriterEntry[] {
  const state = new Map<string, { create: number; version: number }>();
  const out: WriterEntry[] = [];
  let seed = 7;
  const next = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  for (let rev = 2; rev <= 121; rev++) {
    const ops = next(4) === 0 ? 2 + next(2) : 1;
    const used = new Set<string>();
    for (let sub = 0; sub < ops; sub++) {
      const name = `/hand/k${next(9)}`;
      if (used.has(name)) continue;
      used.add(name);
      const key = Buffer.from(name);
      const s = state.get(name);
      if (s && next(5) === 0) {
        state.delete(name);
        out.push({ key: revisionKey(rev, used.size - 1, true), value: encodeTombstoneValue(key) });
        continue;
      }
      const create = s?.create ?? rev;
      const version = (s?.version ?? 0) + 1;
      state.set(name, { create, version });
      const lease = next(3) === 0 ? '7587869011225645570' : '0';
      out.push({
        key: revisionKey(rev, used.size - 1, false),
        value: encodePutValue({ key, createRevision: create, modRevision: rev, version, value: Buffer.from(`v${rev}.${sub}`), lease }),
      });
    }
  }
  return out;
}

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

async function startOnBackend(binaries: EtcdBinaries, entries: WriterEntry[], compactAt: number) {
  const dir = await cleanups.tempDir('etcdbr-kv-hash-backend-');
  const db = join(dir, 'hand.db');
  const w = await BoltWriter.create(db, { pageSize: 4096, txid: 2 });
  await w.writeBucket(KEY_BUCKET, entries);
  await w.writeBucket(META_BUCKET, [{ key: SCHEDULED_COMPACT_REV_KEY, value: revisionKey(compactAt, 0, false) }]);
  await w.finish();
  await appendFile(
    db,
    createHash('sha256')
      .update(await readFile(db))
      .digest(),
  );
  const peerPort = await freePort();
  const peer = `http://127.0.0.1:${peerPort}`;
  const dataDir = join(dir, 'data');
  await restoreBaseSnapshot({
    binaries,
    snapshotFile: db,
    dataDir,
    name: 'hand',
    initialCluster: `hand=${peer}`,
    initialClusterToken: 'hand',
    initialAdvertisePeerUrls: [peer],
    skipHashCheck: false,
  });
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'hand', peerPort, initialCluster: `hand=${peer}` });
  cleanups.push(() => etcd.stop());
  const client = etcdClient(etcd.clientUrl);
  cleanups.push(() => Promise.resolve(client.close()));
  return client;
}

describe.each([
  ['3.4', etcdBinaries],
  ['3.5', etcd35Binaries],
])('a hand-built backend, started by etcd %s', (line, binaries) => {
  it('HashKV at every revision from its compaction to its head equals the drill’s over the entries written', async () => {
    const written = history();
    const compactAt = 60;
    const client = await startOnBackend(await binaries(), written, compactAt);
    const entries = written.map((e) => recordOfEntry(e.key, e.value, emptyRecord(), 'hand-built'));
    const head = entries.at(-1)!.main;
    const rows: Array<{ revision: number; compactRevision: number; etcd: number; ours: number }> = [];
    // etcd 3.4 refuses HashKV at its compaction revision; 3.5 answers (the hash its compaction stored).
    for (let m = line === '3.4' ? compactAt + 1 : compactAt; m <= head; m++) {
      const a = await client.hashKv(m);
      rows.push({ revision: m, compactRevision: a.compactRevision, etcd: a.hash, ours: hashesOf(entries, a.compactRevision, [m])[0]! });
    }
    expect(rows.filter((r) => r.compactRevision === compactAt).length).toBeGreaterThan(50);
    expect(rows.filter((r) => r.etcd !== r.ours)).toEqual([]);
  }, 60_000);
});
