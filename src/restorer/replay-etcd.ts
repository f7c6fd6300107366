/**
 * The local etcd a restore starts on its `.part` data dir: for the online replay, and for the compact Job
 * (`keepEtcdRunning`), which goes on using it. It runs with etcd auth off: upstream calls AuthDisable in its
 * embedded etcd; ours is a child process and we hold no root password, so the flag is switched off in the
 * stopped backend instead (etcd reads it only at start) and switched back on after etcd stopped. `.part` is
 * fresh from snapshot restore and the replay makes no auth requests, so its WAL holds no auth entry that
 * etcd could re-apply over the flag.
 */
import type { Logger } from '@etcdbrctl/snapstore';
import { setAuthEnabled } from '../backend/auth-flag.js';
import { type EtcdBinaries, connectLocalEtcd, type LocalEtcdClient, startLocalEtcd, type LocalEtcd } from '../etcd/index.js';
import { backendPath } from './work-dirs.js';

export interface ReplayEtcdOptions {
  binaries: EtcdBinaries;
  name: string;
  embeddedEtcdQuotaBytes: number;
  maxRequestBytes: number;
  maxTxnOps: number;
  /** Sync writes; off by default (upstream runs its embedded etcd with UnsafeNoFsync on 3.5+). */
  fsync?: boolean | undefined;
  logger: Logger;
  signal?: AbortSignal | undefined;
}

export interface ReplayEtcd {
  readonly etcd: LocalEtcd;
  readonly client: LocalEtcdClient;
  /** The base had etcd auth enabled: it is off while this etcd runs. */
  readonly authWasEnabled: boolean;
  /** After a replay that succeeded: stops etcd, then switches auth back on where the base had it. */
  stop(): Promise<void>;
  /** After a failure: stops etcd (also a stalled one) and leaves the backend as it is (`.part` goes anyway). */
  abandon(): Promise<void>;
  /** Leaves etcd running for the caller, who stops it and then re-enables auth (see reenableAuth). */
  handOver(): LocalEtcd;
}

/** Starts etcd on `partDir` with auth switched off, and connects to it. */
export async function startReplayEtcd(partDir: string, opts: ReplayEtcdOptions): Promise<ReplayEtcd> {
  const { logger, signal } = opts;
  const authWasEnabled = (await setAuthEnabled(backendPath(partDir), false)).previous;
  if (authWasEnabled) logger.info({}, 'base snapshot has etcd auth enabled: replaying with auth off, switching it back on afterwards');
  const etcd = await startLocalEtcd({
    binaries: opts.binaries,
    dataDir: partDir,
    name: opts.name,
    quotaBackendBytes: opts.embeddedEtcdQuotaBytes,
    maxRequestBytes: opts.maxRequestBytes,
    maxTxnOps: opts.maxTxnOps,
    unsafeNoFsync: !opts.fsync,
    // A single member that nobody else talks to: with etcd's defaults (100 ms heartbeat, 1 s election
    // timeout) it waits ~0.8 s to elect itself before the first transaction; 10/100 ms takes ~0.06 s.
    extraArgs: ['--heartbeat-interval=10', '--election-timeout=100'],
    signal,
  });
  logger.info({ pid: etcd.pid, clientUrl: etcd.clientUrl }, 'replay etcd started');
  let client: LocalEtcdClient;
  try {
    client = await connectLocalEtcd(etcd.clientUrl);
  } catch (err) {
    await etcd.stop();
    throw err;
  }
  return {
    etcd,
    client,
    authWasEnabled,
    stop: async () => {
      client.close();
      await etcd.stop();
      if (authWasEnabled) await setAuthEnabled(backendPath(partDir), true);
    },
    abandon: async () => {
      client.close();
      await etcd.stop();
    },
    handOver: () => {
      client.close();
      return etcd;
    },
  };
}

/**
 * Switches etcd auth back on in a stopped data dir whose replay ran with it off. Only for callers of
 * `keepEtcdRunning` whose result says `authDisabledForReplay`.
 */
export async function reenableAuth(dataDir: string): Promise<void> {
  await setAuthEnabled(backendPath(dataDir), true);
}
