import type { Snapshot, SnapStore } from '@etcdbrctl/snapstore';
import type { HttpServerConfig } from '../config/types.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { HealthState } from './health.js';

/**
 * What the HTTP API needs from the running snapshotter (upstream `TriggerFullSnapshot` /
 * `TriggerDeltaSnapshot`). Both are serialized with scheduled work by the snapshotter and resolve once
 * the snapshot is stored; a rejection becomes a 500 with the error's message.
 */
export interface SnapshotterControl {
  /** Takes and stores a full snapshot now; `isFinal` marks it `.final`. */
  triggerFullSnapshot(isFinal: boolean): Promise<Snapshot>;
  /** Stores the pending watch events as a delta; undefined when there were none (no object written). */
  triggerDeltaSnapshot(): Promise<Snapshot | undefined>;
}

/** Finds the sidecar that runs the snapshotter, for followers that are asked to snapshot. */
export interface LeaderProxy {
  /**
   * Base URL of the leading sidecar's HTTP server (`<scheme>://<host>:<port>`, no path), computed by
   * the caller from etcd's leader and member list; undefined when there is no leader right now.
   */
  findLeaderUrl(): Promise<string | undefined>;
}

import type { BackupScrubber } from '../verifier/scrubber.js';
import type { Routes } from './http-router.js';
import type { ApiAuthOptions } from './api-auth.js';
import type { OnDemandMaintenance } from '../cluster/on-demand.js';

export interface HttpServerDeps {
  config: HttpServerConfig;
  logger: Logger;
  metrics: Metrics;
  health: HealthState;
  /** The snapshotter of this sidecar; undefined on followers and before it has started. */
  snapshots: () => SnapshotterControl | undefined;
  /** The configured store; undefined when no storage provider is configured. */
  store: () => SnapStore | undefined;
  /** Backup verification (`/snapshot/verify`); undefined without a store. */
  scrubber?: BackupScrubber;
  /**
   * On-demand maintenance (ours) while this sidecar leads, with the signal that ends its term; undefined on
   * followers.
   */
  maintenance?: () => { control: OnDemandMaintenance; signal: AbortSignal } | undefined;
  /** Who may call the API (ours); without it every request is let in, as upstream. */
  auth?: ApiAuthOptions;
  leaderProxy?: LeaderProxy;
  /** CA bundle (PEM) trusted when talking TLS to the leader; used only when this server runs TLS (as upstream's `--cacert`). */
  proxyCa?: Buffer;
  /** Interface to listen on; default all interfaces, as upstream's `:<port>`. */
  host?: string;
  /** Timeout of the leader's `/healthz` check before forwarding; default 5 s. */
  leaderHealthTimeoutMs?: number;
  /** Registers more routes (for example `/initialization/*` and `/config`). */
  extraRoutes?: (routes: Routes) => void;
}
