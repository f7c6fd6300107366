/**
 * What a failed etcd call throws (our transport, grpc.ts, makes them from the gRPC status and message
 * etcd answers with, or from its own connection and deadline handling). A code is what the rest of the
 * project looks at, as with KubeError and SnapStoreError.
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

/** gRPC status codes (google.golang.org/grpc/codes) that mean more than "etcd refused the request". */
const BY_GRPC_STATUS: ReadonlyMap<number, EtcdErrorCode> = new Map([
  [1, 'E_ETCD_CANCELLED'],
  [4, 'E_ETCD_TIMEOUT'],
  [7, 'E_ETCD_AUTH'],
  [14, 'E_ETCD_UNAVAILABLE'],
  [16, 'E_ETCD_AUTH'],
]);

/** The EtcdError of a gRPC status (from a response's trailers) and its message, as etcd sent them. */
export function etcdErrorFromStatus(status: number, message: string): EtcdError {
  if (/required revision has been compacted/i.test(message)) return new EtcdError('E_ETCD_COMPACTED', message);
  return new EtcdError(BY_GRPC_STATUS.get(status) ?? 'E_ETCD_REQUEST', message);
}
