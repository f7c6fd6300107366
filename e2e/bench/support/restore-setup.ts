/**
 * What the restore benches (restore.bench.ts, offline-replay.bench.ts) share: the restore options of a
 * single-member restore in a bench directory, the Local store the chains are written to, and a small base.
 */
import path from 'node:path';
import { Etcd3 } from 'etcd3';
import { silentLogger } from '../../../snapstore/src/index.js';
import type { SnapStore, Snapshot } from '../../../snapstore/src/index.js';
import { openLocalStore } from '../../../snapstore/src/providers/local.js';
import type { EtcdBinaries } from '../../../src/etcd/binaries.js';
import type { RestoreOptions } from '../../../src/restorer/restore.js';
import { startTestEtcd } from '../../../test/support/etcd.js';
import { MiB } from './measure.js';
import { baseSnapshot } from '../../../test/support/restore-chain.js';

/** A single-member restore into `dir/data` (temp files in `dir/tmp`), with `over` on top. */
export function benchRestoreOptions(binaries: EtcdBinaries, dir: string, over: Partial<RestoreOptions> = {}): RestoreOptions {
  return {
    binaries,
    dataDir: path.join(dir, 'data'),
    tempDir: path.join(dir, 'tmp'),
    name: 'default',
    initialCluster: 'default=http://127.0.0.1:2380',
    initialClusterToken: 'etcd-cluster',
    initialAdvertisePeerUrls: ['http://127.0.0.1:2380'],
    skipHashCheck: false,
    maxFetchers: 6,
    embeddedEtcdQuotaBytes: 8 * 1024 * MiB,
    maxRequestBytes: 10 * MiB,
    maxTxnOps: 10240,
    // The restore command's default (--restored-lease-ttl 1h): keys keep their leases, as in production.
    restoredLeaseTtlSeconds: 3600,
    logger: silentLogger,
    ...over,
  };
}

/** The Local store under `root` that a bench writes its chain to. */
export async function benchLocalStore(root: string, tmp: string): Promise<SnapStore> {
  return openLocalStore({
    provider: 'Local',
    rootDir: root,
    container: 'bench',
    prefix: 'v2',
    maxParallelChunkUploads: 5,
    minChunkSize: 5 * MiB,
    tempDir: tmp,
  });
}

/** A real full snapshot (300 keys of 200 bytes) of a fresh test etcd, taken into `store`. */
export async function smallBaseSnapshot(store: SnapStore): Promise<Snapshot> {
  const src = await startTestEtcd();
  const c = new Etcd3({ hosts: src.clientUrl });
  try {
    for (let i = 0; i < 300; i++) await c.put(`/registry/bench/base/${i}`).value(Buffer.alloc(200, 0x62));
    return await baseSnapshot(c, store);
  } finally {
    c.close();
    await src.cleanup();
  }
}
