/**
 * Every error this project throws carries a stable `code` beside its message, so that whoever catches it
 * decides on the code, never on the text: the command line picks the exit code and the hint
 * (src/cli/failure.ts), the HTTP API the status (src/server/error-status.ts), callers whether to retry.
 * Each module has its own error classes with their own codes (SnapStoreError, EtcdError, KubeError,
 * BoltError, …); `EtcdbrError` with one of the general codes below serves where a module has no class of its own.
 */
export abstract class CodedError extends Error {
  abstract readonly code: string;
}

export type GeneralErrorCode =
  /** The operator's input is wrong (flags, files, names, parameters): they must change something. */
  | 'E_INVALID_INPUT'
  /** The current state forbids it (already running, not empty, a lock held, the wrong volume). */
  | 'E_CONFLICT'
  /** A system outside (etcd, etcd-wrapper, the leader's sidecar) did not answer, or not in time. */
  | 'E_UNAVAILABLE'
  /** Data failed a check (checksum, structure). */
  | 'E_CORRUPT'
  /** An operation on a reachable system did not succeed (after its retries). */
  | 'E_FAILED'
  /** Cancelled: shutdown, or the end of a leader term. */
  | 'E_STOPPED'
  /** A broken invariant: a bug of ours. */
  | 'E_INTERNAL';

export class EtcdbrError extends CodedError {
  override readonly name = 'EtcdbrError';
  constructor(
    readonly code: GeneralErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The value a promise rejected with or a callback received, as an Error: libraries may throw anything. A
 * non-Error is wrapped (E_INTERNAL: nothing we call is meant to throw one), keeping the value as the cause.
 */
export function asError(value: unknown): Error {
  return value instanceof Error ? value : new EtcdbrError('E_INTERNAL', String(value), { cause: value });
}

/** The code of an error of ours (or of Node's system errors), undefined for anything else. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  const code = (err as { code: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}
