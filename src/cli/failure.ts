/**
 * How a failed command reaches the operator: one line (`Error: …`, what was wrong and where, then what to
 * do) and an exit code, decided from the error's stable `code` (our typed errors: snapstore, etcd config,
 * Kubernetes, bbolt, initialization, etcd calls; Node's system errors) or, for the errors of the etcd
 * client library that reach us unwrapped, their class.
 * The stack and the cause chain are for developers: logged at debug level only (`--log-level=5`).
 *
 * Exit codes: every failure exits 1, as upstream does (cobra and logrus' Fatal), so scripts and Kubernetes
 * Jobs see what they saw before; the table keeps the exit code per rule so that a distinction is one edit.
 */
import { errorCode } from '../errors.js';
import { ETCD_UNREACHABLE_CODES, isEtcdError } from '../etcd/index.js';
import type { Logger } from '../log.js';
import type { CliIO } from '../config/context.js';

export interface FailureRule {
  exitCode: number;
  /** What to do, when the code implies it and the message itself does not say it. */
  hint?: string;
}

const FAILED: FailureRule = { exitCode: 1 };

const STORE_CREDENTIALS_HINT =
  'check the credentials the *_APPLICATION_CREDENTIALS[_JSON] variable points to (the file must exist and hold valid values) and what they are allowed to do';
const STORE_UNREACHABLE_HINT = "check the store's endpoint and that it can be reached from here, then run the command again";
const ETCD_UNREACHABLE_HINT = 'check --endpoints (and the TLS flags) and that etcd is running there';
const KUBE_HINT = 'check the kubeconfig (KUBECONFIG) or the service account, and the RBAC rules of the sidecar';

/** By error code. Codes not listed here fail with exit code 1 and their message alone. */
export const FAILURE_RULES: Readonly<Record<string, FailureRule>> = {
  // snapstore (SnapStoreError)
  E_CREDENTIALS: { exitCode: 1, hint: STORE_CREDENTIALS_HINT },
  E_UNREACHABLE: { exitCode: 1, hint: STORE_UNREACHABLE_HINT },
  // Kubernetes (KubeError)
  E_KUBE_CONFIG: { exitCode: 1, hint: KUBE_HINT },
  E_KUBE_FORBIDDEN: { exitCode: 1, hint: KUBE_HINT },
  E_KUBE_UNREACHABLE: { exitCode: 1, hint: KUBE_HINT },
  // Node's system errors, from files the command reads or writes
  EACCES: { exitCode: 1, hint: 'check the permissions of that path for the user this runs as' },
  EPERM: { exitCode: 1, hint: 'check the permissions of that path for the user this runs as' },
  ENOSPC: { exitCode: 1, hint: 'free space on that file system' },
  EROFS: { exitCode: 1, hint: 'that file system is read-only: use a writable path' },
  // src/errors.ts: a broken invariant of ours
  E_INTERNAL: { exitCode: 1, hint: 'this is a bug in etcdbrctl: please report it with the output of the same command at --log-level=5' },
};

export interface FailureReport {
  exitCode: number;
  /** One line, without the newline. */
  line: string;
}

/** Decides what an operator is told about `err` and which exit code the process returns. Pure. */
export function describeFailure(err: unknown): FailureReport {
  const message = oneLine(err instanceof Error ? err.message : String(err));
  if (isEtcdError(err) && ETCD_UNREACHABLE_CODES.has(err.code)) {
    // gRPC appends an empty "Resolution note:" when name resolution has nothing to say.
    const detail = message.replace(/\.?\s*Resolution note$/, '');
    return { exitCode: 1, line: `Error: cannot reach etcd: ${detail}; ${ETCD_UNREACHABLE_HINT}` };
  }
  const code = errorCode(err);
  const rule = (code !== undefined ? FAILURE_RULES[code] : undefined) ?? FAILED;
  return { exitCode: rule.exitCode, line: rule.hint === undefined ? `Error: ${message}` : `Error: ${message}; ${rule.hint}` };
}

/**
 * A command that failed after its stop signal (SIGINT/SIGTERM) was interrupted, whatever the error it ended
 * with: a replay etcd that a terminal's Ctrl-C also reached would otherwise read as "cannot reach etcd".
 * `note` says what was left behind (e.g. the data dir as it was).
 */
export function describeInterruption(command: string, signal: AbortSignal, note?: string): FailureReport {
  const reason = signal.reason instanceof Error ? signal.reason.message : 'stop requested';
  return { exitCode: 1, line: `Error: ${command} was interrupted (${reason}) before it finished${note ? `; ${note}` : ''}` };
}

export interface FailureContext {
  /** The command's stop signal: once aborted, any failure is reported as the interruption. */
  signal?: AbortSignal | undefined;
  /** Said after an interruption (what it left behind). */
  interruptedNote?: string;
}

/**
 * Reports a failed command: the one line on stderr and, at debug level, the whole error with its stack and
 * causes. Returns the exit code.
 */
export function reportFailure(io: CliIO, logger: Logger, command: string, err: unknown, context: FailureContext = {}): number {
  logger.debug({ err }, `${command} failed`);
  const report = context.signal?.aborted ? describeInterruption(command, context.signal, context.interruptedNote) : describeFailure(err);
  io.stderr.write(`${report.line}\n`);
  return report.exitCode;
}

/** Library messages may span lines (gRPC, aggregated errors); the operator gets one, without trailing blanks. */
function oneLine(text: string): string {
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .join(' ')
    .replace(/[\s.:;,]+$/, '');
}
