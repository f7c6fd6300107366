/**
 * What a subcommand's `run(config, ctx)` receives besides its config. Everything process-wide (env,
 * streams, signals, home directory) comes in here, so commands stay testable in-process.
 */
import type { StoreConfig } from '@etcdbrctl/snapstore';
import type { Env, PodEnvironment } from './pod-environment.js';
import type { StoreRole } from './store.js';
import type { Logger } from '../log.js';
import type { VersionInfo } from '../version.js';

export type { Env, PodEnvironment } from './pod-environment.js';

/** Minimal writable streams; process.stdout/stderr or test buffers. */
export interface CliIO {
  /** `isTTY` and `columns` (a terminal's, as on process.stdout): the width `--help` wraps at. */
  stdout: { write(chunk: string): unknown; readonly isTTY?: boolean; readonly columns?: number };
  stderr: { write(chunk: string): unknown };
}

export interface CommandContext {
  env: Env;
  /** POD_NAME, POD_NAMESPACE, ETCD_CONF, ETCD_BIN & co., read once from `env`. */
  pod: PodEnvironment;
  io: CliIO;
  logger: Logger;
  /** Aborted on SIGINT/SIGTERM; long-running commands stop when it fires. */
  signal: AbortSignal;
  /** Base of relative Local store containers: $HOME as upstream reads it; undefined when HOME is not set. */
  homeDir: string | undefined;
  version: VersionInfo;
  /**
   * The command's stores, resolved (container, prefix, credentials) before `run` was called; a role is
   * missing when its provider is empty (or, for `secondary`, when backup sync is disabled).
   */
  stores: Partial<Record<StoreRole, StoreConfig>>;
  /** Resolves a store again, re-reading credential files (for credential rotation). */
  resolveStore(role: StoreRole): Promise<StoreConfig | undefined>;
}
