import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDecompressStream, newSnapshot, silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import { saveVerifiedFullSnapshot, takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { etcdBinaries, startEtcdWithClient, startTestEtcd, type EtcdWithClient } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { ours } from '../support/etcd-client.js';

describe('full snapshot to a Local store', () => {
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let dir: string;
  let store: SnapStore;

  beforeAll(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-full-');
    ({ client, dir } = etcdEnv);
    store = await openLocalStore(join(dir, 'store'), join(dir, 'tmp'));
    for (let i = 0; i < 200; i++) await client.put(`/registry/k${i}`).value(`value-${i}-${'x'.repeat(i * 10)}`);
  });

  afterAll(async () => {
    await store?.close();
    await etcdEnv?.cleanup();
  });

  it.each([['gzip'], ['zstd'], [undefined]] as const)(
    'streams a verified snapshot (%s) that etcdctl restores with all keys',
    async (compression) => {
      const snap = await takeFullSnapshot(
        { client: ours(client), store, compression, now: () => new Date(), logger: silentLogger },
        { isFinal: false, snapshotTimeoutMs: 60_000, connectionTimeoutMs: 5_000 },
      );
      const revision = Number((await client.get('foo').exec()).header.revision);
      expect(snap.kind).toBe('Full');
      expect(snap.lastRevision).toBe(revision);
      const listed = await store.list();
      const found = listed.find((s) => s.snapName === snap.snapName);
      expect(found).toBeDefined();

      const raw = await store.fetch(found!);
      const payload = await buffer(raw.pipe(createDecompressStream(found!.compressionSuffix, found!.snapName)));
      expect(payload.length % 512).toBe(32);
      const db = payload.subarray(0, payload.length - 32);
      expect(createHash('sha256').update(db).digest().equals(payload.subarray(-32))).toBe(true);

      // The stored payload is exactly what etcdctl restores (hash check on).
      const bins = await etcdBinaries();
      const file = join(dir, `${snap.snapName}.db`);
      await writeFile(file, payload);
      const restored = join(dir, `restored-${snap.snapName}`);
      const tool = bins.etcdutl ?? bins.etcdctl!;
      execFileSync(tool, ['snapshot', 'restore', file, '--data-dir', restored], {
        stdio: 'ignore',
        env: { ...process.env, ETCDCTL_API: '3' },
      });
      const again = await startTestEtcd({ dataDir: restored });
      const c2 = new Etcd3({ hosts: again.clientUrl });
      try {
        expect(await c2.get('/registry/k199').string()).toBe(`value-199-${'x'.repeat(1990)}`);
        expect(await c2.getAll().prefix('/registry/').count()).toBe(200);
      } finally {
        c2.close();
        await again.stop();
      }
    },
  );

  it('uploads nothing when the stream fails verification', async () => {
    const payload = await readFile(
      join(
        dir,
        (await readdir(dir)).find((f) => f.endsWith('.db'))!,
      ),
    );
    const before = (await store.list()).length;
    const snap = newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 999, createdOn: new Date(), compressionSuffix: '.gz' });
    const corrupt = Buffer.from(payload);
    corrupt[4096]! ^= 0x01;
    await expect(saveVerifiedFullSnapshot(store, snap, Readable.from([corrupt]), 'gzip')).rejects.toThrow(/expected SHA256/);
    await expect(saveVerifiedFullSnapshot(store, snap, Readable.from([payload.subarray(0, payload.length - 32)]), 'gzip')).rejects.toThrow(
      /hash seems to be missing/,
    );
    const after = await store.list();
    expect(after.length).toBe(before);
    expect(after.some((s) => s.lastRevision === 999)).toBe(false);
    const files = await readdir(join(dir, 'store', 'v2'));
    expect(files.filter((f) => f.startsWith('.'))).toEqual([]);
  });
});
