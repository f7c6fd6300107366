/**
 * What a failed etcd call throws. The etcd client library tells failures apart only by its own error classes
 * (or, on the streams it does not wrap, grpc-js's numeric status), which would tie every caller to it; a
 * code is what the rest of the project looks at, as with KubeError and SnapStoreError.
 */
import { CodedError } from '../errors.js';

export type EtcdErrorCode =
  /** No connection to etcd, or it broke during the call. */
  | 'E_ETCD_UNAVAILABLE'
  /** No answer within the call's deadline. */
  | 'E_ETCD_TIMEOUT'
  /** The client was closed before or during the call. */
  | 'E_ETCD_CLOSED'
  /** The call was cancelled on our side (shutdown). */
  | 'E_ETCD_CANCELLED'
  /**
   * The client library refuses calls to a host for a while after several failed ones (its circuit breaker);
   * apart from E_ETCD_UNAVAILABLE because etcd itself was not asked.
   */
  | 'E_ETCD_CIRCUIT_OPEN'
  /** The revision asked for is compacted away. */
  | 'E_ETCD_COMPACTED'
  /** Authentication failed, or the user may not do this. */
  | 'E_ETCD_AUTH'
  /** Any other refusal or failure; etcd's message says which. */
  | 'E_ETCD_REQUEST';

export class EtcdError extends CodedError {
  override readonly name: string = 'EtcdError';
  constructor(
    readonly code: EtcdErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export function isEtcdError(err: unknown, code?: EtcdErrorCode): err is EtcdError {
  return err instanceof EtcdError && (code === undefined || err.code === code);
}

/** The codes that mean etcd could not be reached or did not answer (the CLI says so in words). */
export const ETCD_UNREACHABLE_CODES: ReadonlySet<EtcdErrorCode> = new Set(['E_ETCD_UNAVAILABLE', 'E_ETCD_TIMEOUT', 'E_ETCD_CLOSED']);

/** etcd3's error classes by name: matching names keeps the library out of modules that load before it. */
const BY_CLASS: ReadonlyMap<string, EtcdErrorCode> = new Map([
  ['GRPCUnavailableError', 'E_ETCD_UNAVAILABLE'],
  ['GRPCDeadlineExceededError', 'E_ETCD_TIMEOUT'],
  ['ClientClosedError', 'E_ETCD_CLOSED'],
  ['GRPCCancelledError', 'E_ETCD_CANCELLED'],
  ['BrokenCircuitError', 'E_ETCD_CIRCUIT_OPEN'],
  ['GRPCUnauthenticatedError', 'E_ETCD_AUTH'],
  ['EtcdAuthenticationFailedError', 'E_ETCD_AUTH'],
  ['EtcdInvalidAuthTokenError', 'E_ETCD_AUTH'],
  ['EtcdPermissionDeniedError', 'E_ETCD_AUTH'],
]);

/** grpc-js status codes, for the errors of streams the library hands over uncast. */
const BY_GRPC_STATUS: ReadonlyMap<number, EtcdErrorCode> = new Map([
  [1, 'E_ETCD_CANCELLED'],
  [4, 'E_ETCD_TIMEOUT'],
  [7, 'E_ETCD_AUTH'],
  [14, 'E_ETCD_UNAVAILABLE'],
  [16, 'E_ETCD_AUTH'],
]);

/**
 * Turns whatever an etcd call threw into an EtcdError with the same message. The original is not kept as
 * `cause`: the logger prints an error's message followed by its causes', which would repeat the message.
 */
export function toEtcdError(err: unknown): EtcdError {
  if (err instanceof EtcdError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new EtcdError(codeOf(err, message), message);
}

function codeOf(err: unknown, message: string): EtcdErrorCode {
  if (/required revision has been compacted/i.test(message)) return 'E_ETCD_COMPACTED';
  const byClass = err instanceof Error ? BY_CLASS.get(err.constructor.name) : undefined;
  if (byClass !== undefined) return byClass;
  const status = err !== null && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  if (typeof status === 'number') return BY_GRPC_STATUS.get(status) ?? 'E_ETCD_REQUEST';
  return 'E_ETCD_REQUEST';
}

/** The EtcdError of a gRPC status (from a response's trailers) and its message, as etcd sent them. */
export function etcdErrorFromStatus(status: number, message: string): EtcdError {
  if (/required revision has been compacted/i.test(message)) return new EtcdError('E_ETCD_COMPACTED', message);
  return new EtcdError(BY_GRPC_STATUS.get(status) ?? 'E_ETCD_REQUEST', message);
}
