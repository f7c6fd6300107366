import { join } from 'node:path';
import { silentLogger } from '@etcdbrctl/snapstore';
import { restorationGroup } from '../../src/config/groups/restoration.js';
import type { RestorationConfig } from '../../src/config/types.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import type { RestoreOptions } from '../../src/restorer/restore.js';

/**
 * Restore options with the restoration flags' defaults for a single member `default` (peer
 * 127.0.0.1:2380), into `<dir>/data` with scratch space in `<dir>/restore-tmp`; `over` wins.
 */
export function restoreOptions(binaries: EtcdBinaries, dir: string, over: Partial<RestoreOptions> = {}): RestoreOptions {
  return {
    binaries,
    dataDir: join(dir, 'data'),
    tempDir: join(dir, 'restore-tmp'),
    name: 'default',
    initialCluster: 'default=http://127.0.0.1:2380',
    initialClusterToken: 'etcd-cluster',
    initialAdvertisePeerUrls: ['http://127.0.0.1:2380'],
    skipHashCheck: false,
    maxFetchers: 3,
    embeddedEtcdQuotaBytes: 8 * 1024 ** 3,
    maxRequestBytes: 10 * 1024 * 1024,
    maxTxnOps: 10240,
    restoredLeaseTtlSeconds: restorationGroup.defaults().restoredLeaseTtl / 1000,
    logger: silentLogger,
    ...over,
  };
}

/**
 * The `compact` Job's restoration config for a temp dir: upstream's flag defaults (restorationGroup), with
 * the data and temp dirs under `dir` and loopback peer URLs.
 */
export function compactionRestoration(dir: string, over: Partial<RestorationConfig> = {}): RestorationConfig {
  return {
    ...restorationGroup.defaults(),
    initialCluster: 'default=http://127.0.0.1:2380',
    initialAdvertisePeerURLs: ['http://127.0.0.1:2380'],
    dataDir: join(dir, 'compaction.etcd'),
    tempDir: join(dir, 'compaction.tmp'),
    ...over,
  };
}
