import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { findEtcdBinaries, type EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd, type LocalEtcd, type LocalEtcdOptions } from '../../src/etcd/local-etcd.js';

let binariesPromise: Promise<EtcdBinaries> | undefined;

/** The etcd binaries of this machine (ETCD_BIN or PATH); `npm test` installs them when missing. */
export function etcdBinaries(): Promise<EtcdBinaries> {
  binariesPromise ??= findEtcdBinaries({ etcdBin: process.env.ETCD_BIN, path: process.env.PATH ?? '' });
  return binariesPromise;
}

/**
 * Where `npm test`'s setup (scripts/setup.mjs, `ensureEtcd35`) unpacks Debian trixie's etcd 3.5 packages:
 * the restore tests run on etcd 3.5 as well as on the machine's own etcd.
 */
export const ETCD35_BIN_DIR = join(fileURLToPath(new URL('../..', import.meta.url)), 'node_modules', '.cache', 'etcd-3.5.16', 'usr', 'bin');

let binaries35Promise: Promise<EtcdBinaries> | undefined;

/** etcd 3.5's binaries (etcd, etcdctl, etcdutl); fails, naming the fix, when the setup has not unpacked them. */
export function etcd35Binaries(): Promise<EtcdBinaries> {
  binaries35Promise ??= (async () => {
    const etcd = join(ETCD35_BIN_DIR, 'etcd');
    if (!existsSync(join(ETCD35_BIN_DIR, 'etcdutl'))) {
      throw new Error(`etcd 3.5 is not at ${ETCD35_BIN_DIR}: run "node scripts/setup.mjs --tests" (npm test runs it first)`);
    }
    const found = await findEtcdBinaries({ etcdBin: etcd, path: '' });
    const version = await found.version();
    if (!version.startsWith('3.5.')) throw new Error(`${etcd} is etcd ${version}, not 3.5`);
    return found;
  })();
  return binaries35Promise;
}

export interface TestEtcd extends LocalEtcd {
  /** Stops etcd and removes its temp dir. */
  cleanup(): Promise<void>;
}

/** A fresh single-member etcd in its own temp dir on free loopback ports. */
export async function startTestEtcd(opts: Partial<LocalEtcdOptions> = {}): Promise<TestEtcd> {
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-test-etcd-'));
  const binaries = await etcdBinaries();
  try {
    const etcd = await startLocalEtcd({ binaries, dataDir: join(dir, 'data'), ...opts });
    return Object.assign(Object.create(null) as object, etcd, {
      async cleanup() {
        await etcd.stop();
        await rm(dir, { recursive: true, force: true });
      },
    }) as TestEtcd;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

export interface EtcdWithClient {
  etcd: TestEtcd;
  client: Etcd3;
  /** A fresh temp dir for the test's own files (stores, restores), apart from etcd's. */
  dir: string;
  /** Closes the client, stops etcd and removes both temp dirs. */
  cleanup(): Promise<void>;
}

/** {@link startTestEtcd}, a client on it and a scratch dir named `<dirPrefix>…`: how most etcd tests begin. */
export async function startEtcdWithClient(dirPrefix: string): Promise<EtcdWithClient> {
  const etcd = await startTestEtcd();
  const client = new Etcd3({ hosts: etcd.clientUrl });
  let dir: string;
  try {
    dir = await mkdtemp(join(tmpdir(), dirPrefix));
  } catch (err) {
    client.close();
    await etcd.cleanup();
    throw err;
  }
  return {
    etcd,
    client,
    dir,
    async cleanup() {
      client.close();
      await etcd.cleanup();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
