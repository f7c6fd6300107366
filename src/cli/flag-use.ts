/**
 * Which of the flags a command's groups define the command actually uses. The groups follow upstream's
 * `AddFlags` per config struct (cmd/options.go: a command takes every flag of each struct it embeds), so a
 * command gets some flags it has no use for: `restore` takes the snapstore struct's upload tuning, although
 * it never uploads. Two kinds:
 *
 * - ignored: the Go tool accepts the flag for this command (argument lists written for it, such as
 *   etcd-druid's, must keep working), but this implementation does nothing with it. Accepted, named in a
 *   log line, and listed apart in `--help`.
 * - refused: a flag of ours (not in the Go tool) that this command does not use. Not accepted at all, with
 *   an error that says so: accepting it would suggest it does something.
 *
 * Pure data; main.ts applies it.
 */
import type { CommandName } from '../config/types.js';

/** The snapstore struct's upload tuning (upstream `SnapstoreConfig.AddFlags`): only commands that upload use it. */
const UPLOAD_TUNING = ['max-parallel-chunk-uploads', 'min-chunk-size'] as const;

/**
 * Upstream's restoration struct configures the embedded etcd its restore replays deltas into: auto-compaction
 * and the client's send limit. Our replay compacts nothing (the restored revisions are the backup's) and
 * sizes its own requests, so these do nothing here.
 */
const REPLAY_ETCD_TUNING = ['auto-compaction-mode', 'auto-compaction-retention', 'max-call-send-message-size'] as const;

/** Upstream's `EtcdConnectionConfig.AddFlags`, which `initialize` takes; our initialize never talks to etcd. */
const ETCD_CONNECTION = [
  'endpoints',
  'service-endpoints',
  'etcd-username',
  'etcd-password',
  'etcd-connection-timeout',
  'etcd-snapshot-timeout',
  'etcd-defrag-timeout',
  'insecure-transport',
  'insecure-skip-tls-verify',
  'cert',
  'key',
  'cacert',
] as const;

export interface CommandFlagUse {
  /** Accepted (the Go tool takes them for this command), unused: a log line names each one given. */
  ignored: readonly string[];
  /** Ours, unused by this command: not accepted. */
  refused: readonly string[];
}

export const FLAG_USE: { readonly [N in CommandName]: CommandFlagUse } = {
  // etcd-druid passes the auto-compaction flags to every sidecar; see main.ts for how loud that is.
  server: { ignored: [...REPLAY_ETCD_TUNING], refused: [] },
  // Takes snapshots only: nothing it does decrypts.
  snapshot: { ignored: [], refused: ['encryption-identity-file'] },
  // Reads only: decrypts with identities, never encrypts.
  restore: { ignored: [...UPLOAD_TUNING, ...REPLAY_ETCD_TUNING], refused: ['encryption-recipients-file'] },
  initialize: {
    ignored: [...UPLOAD_TUNING, ...REPLAY_ETCD_TUNING, ...ETCD_CONNECTION],
    refused: ['encryption-recipients-file'],
  },
  compact: { ignored: [...REPLAY_ETCD_TUNING], refused: [] },
  // The source is only read from.
  copy: { ignored: UPLOAD_TUNING.map((f) => `source-${f}`), refused: [] },
  // Not in the Go tool, so nothing to stay compatible with: what they do not use, they refuse.
  ls: { ignored: [], refused: [...UPLOAD_TUNING, 'encryption-recipients-file', 'encryption-identity-file'] },
  verify: { ignored: [], refused: [...UPLOAD_TUNING, 'encryption-recipients-file'] },
};

/** Why a refused flag is not accepted, for the usage error. */
export function refusedFlagMessage(command: CommandName, flag: string): string {
  return `unknown flag: --${flag} (${command} does not use it)`;
}

/** The log line for ignored flags given on a command line. */
export function ignoredFlagsMessage(command: CommandName, flags: readonly string[]): string {
  const list = flags.map((f) => `--${f}`).join(', ');
  return `${list} ${flags.length === 1 ? 'is' : 'are'} ignored by ${command} (accepted for compatibility with etcd-backup-restore)`;
}
