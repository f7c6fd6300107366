/**
 * Real etcd data dirs for the bbolt, WAL and validator tests: an etcd (3.4 here) on free ports writes the
 * data, is stopped, and its data dir is what the tests read. Copies let each test corrupt its own.
 */
import { cp, mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { startTestEtcd } from '../support/etcd.js';
import type { TestEtcd } from '../support/etcd.js';

export interface EtcdDataDir {
  /** Temp dir holding `data` (the etcd data dir) and room for copies. */
  root: string;
  dataDir: string;
  /** Store revision after the last write. */
  revision: number;
  memberIdHex: string;
  clusterIdHex: string;
  /** Number of writes (puts + deletes) made. */
  writes: number;
  cleanup(): Promise<void>;
}

export interface FixtureOptions {
  keys?: number;
  /** Value size of key i; default 100 bytes. */
  valueBytes?: (i: number) => number;
  /** Every n-th key is deleted again (0 = none). */
  deleteEvery?: number;
  /** etcd --snapshot-count (raft snapshots and .snap files); default etcd's. */
  snapshotCount?: number;
  /** Called with the running etcd after the writes (e.g. to look at its lock); etcd is stopped afterwards. */
  whileRunning?: (etcd: TestEtcd) => Promise<void>;
}

/** Deterministic bytes that do not compress and differ per key. */
export function valueOf(i: number, n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = (i * 2654435761) >>> 0 || 1;
  for (let k = 0; k < n; k++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[k] = x & 0xff;
  }
  return b;
}

export function keyOf(i: number): string {
  return `/registry/test/key-${String(i).padStart(6, '0')}`;
}

export async function makeEtcdDataDir(opts: FixtureOptions = {}): Promise<EtcdDataDir> {
  const root = await mkdtemp(join(tmpdir(), 'etcdbr-validate-'));
  const extraArgs = opts.snapshotCount ? [`--snapshot-count=${opts.snapshotCount}`] : [];
  let etcd: TestEtcd | undefined;
  try {
    etcd = await startTestEtcd({ extraArgs });
    const client = new Etcd3({ hosts: etcd.clientUrl });
    let writes = 0;
    let status;
    try {
      const n = opts.keys ?? 50;
      for (let i = 0; i < n; i++) {
        await client.put(keyOf(i)).value(valueOf(i, opts.valueBytes?.(i) ?? 100));
        writes++;
        if (opts.deleteEvery && i % opts.deleteEvery === 0) {
          await client.delete().key(keyOf(i));
          writes++;
        }
      }
      status = await client.maintenance.status();
      if (opts.whileRunning) await opts.whileRunning(etcd);
    } finally {
      client.close();
    }
    await etcd.stop();
    const dataDir = join(root, 'data');
    await cp(etcd.dataDir, dataDir, { recursive: true });
    await etcd.cleanup();
    etcd = undefined;
    return {
      root,
      dataDir,
      revision: Number(status.header.revision),
      memberIdHex: BigInt(status.header.member_id).toString(16),
      clusterIdHex: BigInt(status.header.cluster_id).toString(16),
      writes,
      cleanup: () => rm(root, { recursive: true, force: true }),
    };
  } catch (err) {
    await etcd?.cleanup();
    await rm(root, { recursive: true, force: true });
    throw err;
  }
}

/** A fresh copy of `src.dataDir` under `src.root`, for a test to corrupt. */
export async function copyDataDir(src: EtcdDataDir, name: string): Promise<string> {
  const dir = join(src.root, name, 'data');
  await cp(src.dataDir, dir, { recursive: true });
  return dir;
}

/** Overwrites the file at `path` with `bytes` from `position` on, in place (to corrupt it on purpose). */
export async function patchFile(path: string, position: number, bytes: Buffer): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.write(bytes, 0, bytes.length, position);
  } finally {
    await fh.close();
  }
}
