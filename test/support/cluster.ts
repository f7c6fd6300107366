import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLocalEtcd, type LocalEtcd, type LocalEtcdOptions } from '../../src/etcd/local-etcd.js';
import { freePort } from '../../src/etcd/ports.js';
import { etcdBinaries } from './etcd.js';

export interface ClusterMemberSpec {
  name: string;
  host: string;
  clientPort: number;
  peerPort: number;
  dataDir: string;
  clientUrl: string;
  peerUrl: string;
}

export interface TestCluster {
  dir: string;
  token: string;
  members: ClusterMemberSpec[];
  /** Running processes by member name (absent when stopped). */
  running: Map<string, LocalEtcd>;
  /** `name=peerUrl,...` of all members. */
  initialCluster: string;
  clientUrls(): string[];
  /** (Re)starts one member on its ports and data dir; `state` 'existing' to rejoin. */
  start(name: string, opts?: Partial<LocalEtcdOptions> & { state?: 'new' | 'existing' }): Promise<LocalEtcd>;
  stop(name: string, graceMs?: number): Promise<void>;
  /** Stops everything and removes the temp dir. */
  cleanup(): Promise<void>;
}

interface ClusterOptions {
  namePrefix?: string;
  start?: boolean;
  /** A loopback address per member (e.g. 127.0.0.2), as members on their own pods; default 127.0.0.1. */
  hosts?: string[];
}

/** Times a cluster is formed afresh, on new ports, when one of its ports was taken before its member bound it. */
const PORT_RACE_ATTEMPTS = 3;

/**
 * A multi-member etcd cluster on loopback: fixed free ports per member so members can be stopped and
 * restarted with the same URLs, each in its own data dir under one temp dir.
 *
 * The ports are chosen before the members start (each must know the others' URLs), so another process on
 * the machine (or another test file) can take one in between; etcd then fails with "address already in
 * use", and the whole cluster is formed again on new ports.
 */
export async function startTestCluster(size = 3, opts: ClusterOptions = {}): Promise<TestCluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await formCluster(size, opts);
    } catch (err) {
      if ((err as { code?: unknown }).code !== 'E_PORT_IN_USE' || attempt >= PORT_RACE_ATTEMPTS) throw err;
    }
  }
}

async function formCluster(size: number, opts: ClusterOptions): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-cluster-'));
  const prefix = opts.namePrefix ?? 'etcd-main-';
  const members: ClusterMemberSpec[] = [];
  // freePort only knows a port is free now: ports chosen here but not bound yet must not be chosen twice.
  const taken = new Set<string>();
  const distinctPort = async (host: string): Promise<number> => {
    for (;;) {
      const port = await freePort(host);
      if (!taken.has(`${host}:${port}`)) {
        taken.add(`${host}:${port}`);
        return port;
      }
    }
  };
  for (let i = 0; i < size; i++) {
    const host = opts.hosts?.[i] ?? '127.0.0.1';
    const clientPort = await distinctPort(host);
    const peerPort = await distinctPort(host);
    members.push({
      name: `${prefix}${i}`,
      host,
      clientPort,
      peerPort,
      dataDir: join(dir, `${prefix}${i}`),
      clientUrl: `http://${host}:${clientPort}`,
      peerUrl: `http://${host}:${peerPort}`,
    });
  }
  const token = `cluster-${Math.random().toString(36).slice(2, 8)}`;
  const initialCluster = members.map((m) => `${m.name}=${m.peerUrl}`).join(',');
  const running = new Map<string, LocalEtcd>();
  const binaries = await etcdBinaries();

  const cluster: TestCluster = {
    dir,
    token,
    members,
    running,
    initialCluster,
    clientUrls: () => members.map((m) => m.clientUrl),
    async start(name, o = {}) {
      const m = members.find((x) => x.name === name);
      if (!m) throw new Error(`no member ${name}`);
      const { state, ...rest } = o;
      const etcd = await startLocalEtcd({
        binaries,
        dataDir: m.dataDir,
        name: m.name,
        host: m.host,
        clientPort: m.clientPort,
        peerPort: m.peerPort,
        initialCluster,
        initialClusterState: state ?? 'new',
        initialClusterToken: token,
        // Members of a forming cluster answer /version before they have a leader.
        ...rest,
      });
      running.set(name, etcd);
      return etcd;
    },
    async stop(name, graceMs) {
      const e = running.get(name);
      running.delete(name);
      await e?.stop(graceMs);
    },
    async cleanup() {
      await Promise.all([...running.values()].map((e) => e.stop(5_000)));
      running.clear();
      await rm(dir, { recursive: true, force: true });
    },
  };
  if (opts.start !== false) {
    try {
      await Promise.all(members.map((m) => cluster.start(m.name)));
    } catch (err) {
      await cluster.cleanup();
      throw err;
    }
  }
  return cluster;
}
