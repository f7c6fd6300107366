/**
 * The end of every e2e round trip: `etcdbrctl restore` as a process into a fresh data dir, then a real etcd
 * started on that dir and dumped, so a test compares the restored state with the source etcd's dump.
 */
import { join } from 'node:path';
import { expect } from 'vitest';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries } from '../../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../../test/support/etcd-dump.js';
import { runCli } from './cli-process.js';

/** Restore flags for a single member `default` (peer 127.0.0.1:2380) into `dataDir`, scratch space in `<dir>/restore-tmp`. */
export const restoreFlags = (dir: string, dataDir: string): string[] => [
  `--data-dir=${dataDir}`,
  '--initial-cluster=default=http://127.0.0.1:2380',
  '--initial-advertise-peer-urls=http://127.0.0.1:2380',
  `--restoration-temp-snapshots-dir=${join(dir, 'restore-tmp')}`,
];

/** Starts etcd on a restored data dir, dumps it and stops it again. */
export async function dumpDataDir(dataDir: string): Promise<EtcdDump> {
  const etcd = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  try {
    return await dumpEtcd(etcd.clientUrl);
  } finally {
    await etcd.stop();
  }
}

export interface RestoreFrom {
  /** The store flags (`--storage-provider`, `--store-container`, …) and what else the restore needs. */
  flags: string[];
  env: NodeJS.ProcessEnv;
  /** Scratch directory of the test. */
  dir: string;
  dataDir: string;
}

/** `etcdbrctl restore` (which must succeed), then the restored etcd's dump. */
export async function restoreAndDump(from: RestoreFrom, cleanups: Array<() => Promise<unknown>>): Promise<EtcdDump> {
  const r = await runCli(['restore', ...from.flags, ...restoreFlags(from.dir, from.dataDir)], from.env, cleanups);
  expect(r.code, r.stderr).toBe(0);
  return dumpDataDir(from.dataDir);
}
