/**
 * The drill (runHashDrill) against the machine's etcd, on a chain of one full snapshot taken from it: equal
 * before and after a compaction; a key altered inside the full snapshot (its sha256 recomputed) found at its
 * exact revision while etcd keeps the history, and as "up to the compaction" once etcd compacted past it; and
 * nothing compared when etcd compacted past the store's newest revision.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import type { EtcdClient } from '../../src/etcd/index.js';
import { takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { runHashDrill } from '../../src/verifier/hash-drill.js';
import { memberHashSource } from '../../src/verifier/member-source.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { etcdClient } from '../support/etcd-client.js';
import { startTestEtcd } from '../support/etcd.js';
import { writeHistory } from '../support/hash-history.js';
import { openLocalStore } from '../support/local-store.js';

const cleanups = cleanupAfterEach();

async function setup(): Promise<{ raw: Etcd3; client: EtcdClient; store: SnapStore; root: string; tmp: string; revs: number[] }> {
  const etcd = await startTestEtcd();
  cleanups.push(() => etcd.cleanup());
  const raw = new Etcd3({ hosts: etcd.clientUrl });
  cleanups.push(() => Promise.resolve(raw.close()));
  const client = etcdClient(etcd.clientUrl);
  cleanups.push(() => Promise.resolve(client.close()));
  const root = await cleanups.tempDir('etcdbr-drill-store-');
  const tmp = await cleanups.tempDir('etcdbr-drill-tmp-');
  const store = await openLocalStore(root, tmp);
  cleanups.push(() => store.close());
  const revs = await writeHistory(raw, '/d/', 2);
  await takeFullSnapshot(
    { client, store, compression: undefined, now: () => new Date(), logger: silentLogger },
    { isFinal: false, snapshotTimeoutMs: 60_000, connectionTimeoutMs: 10_000 },
  );
  return { raw, client, store, root, tmp, revs };
}

const drill = (t: Awaited<ReturnType<typeof setup>>) =>
  runHashDrill(t.store, [memberHashSource('etcd-0', t.client)], { tempDir: t.tmp, maxFetchers: 2 });

/**
 * Replaces every `from` with `to` (as long) in the stored full snapshot (bbolt leaves stale copies of pages in
 * free space: the live one is among them), and recomputes its sha256 trailer.
 */
async function alterFull(root: string, from: string, to: string): Promise<void> {
  const dir = join(root, 'v2');
  const name = (await readdir(dir)).find((n) => n.startsWith('Full-'))!;
  const bytes = await readFile(join(dir, name));
  let found = 0;
  for (let at = bytes.indexOf(from); at >= 0; at = bytes.indexOf(from, at + 1), found++) bytes.write(to, at, 'latin1');
  expect(found).toBeGreaterThan(0);
  const db = bytes.subarray(0, bytes.length - 32);
  createHash('sha256')
    .update(db)
    .digest()
    .copy(bytes, bytes.length - 32);
  await writeFile(join(dir, name), bytes);
}

describe('runHashDrill', () => {
  it('a chain taken from etcd is equal to it, before and after etcd compacts', async () => {
    const t = await setup();
    const head = t.revs.at(-1)!;
    const before = await drill(t);
    expect(before).toMatchObject({ outcome: 'match', revision: head, storeRevision: head, deltas: 0 });
    expect(before.members).toEqual([expect.objectContaining({ endpoint: 'etcd-0', compactRevision: -1, equal: true })]);
    await t.client.compact(t.revs[12]!);
    const after = await drill(t);
    expect(after).toMatchObject({ outcome: 'match', revision: head });
    expect(after.members[0]!.compactRevision).toBe(t.revs[12]);
  }, 60_000);

  it('a key altered in the full (trailer recomputed): its exact revision, or up to the compaction once etcd compacted past it', async () => {
    const t = await setup();
    // Round 0's `bin` key: put at its 5th step, never overwritten; the full holds it once.
    const altered = t.revs[4]!;
    await alterFull(t.root, '/d/0/bin', '/d/0/BIN');
    const exact = await drill(t);
    expect(exact.outcome).toBe('mismatch');
    expect(exact.difference).toMatchObject({ fromRevision: altered, toRevision: altered });
    expect(exact.difference!.message).toContain(`in revision ${altered} (held by Full-`);

    const c = t.revs[20]!;
    await t.client.compact(c);
    const compacted = await drill(t);
    expect(compacted.outcome).toBe('mismatch');
    expect(compacted.difference).toMatchObject({ fromRevision: 1, toRevision: c + 1 });
    expect(compacted.difference!.message).toContain(`etcd compacted at revision ${c}`);
  }, 60_000);

  it('etcd compacted past the newest revision of the store: nothing compared, and why', async () => {
    const t = await setup();
    const later = await writeHistory(t.raw, '/later/', 1);
    await t.client.compact(later.at(-1)!);
    const r = await drill(t);
    expect(r.outcome).toBe('inconclusive');
    expect(r.reason).toContain(`compacted its history past revision ${t.revs.at(-1)}`);
  }, 60_000);

  it('several members: each is compared; the one that differs is named, the others listed equal', async () => {
    const t = await setup();
    const real = memberHashSource('etcd-0', t.client);
    // A member whose backend differs from the store from revision 7 on (its hashes there are not etcd-0's).
    const odd: typeof real = {
      endpoint: 'etcd-1',
      status: (signal) => real.status(signal),
      hashKv: async (revision, signal) => {
        const a = await real.hashKv(revision, signal);
        return revision >= 7 ? { ...a, hash: (a.hash ^ 1) >>> 0 } : a;
      },
    };
    const r = await runHashDrill(t.store, [real, odd], { tempDir: t.tmp, maxFetchers: 2 });
    expect(r.outcome).toBe('mismatch');
    expect(r.members.map((m) => [m.endpoint, m.equal])).toEqual([
      ['etcd-0', true],
      ['etcd-1', false],
    ]);
    expect(r.difference).toMatchObject({ endpoint: 'etcd-1', fromRevision: 7, toRevision: 7 });
  }, 60_000);
});
