/**
 * What the lean HTTP/2 client (lean-h2.ts) rejects with, in a module of their own so that the door (index.ts)
 * exports them without loading the client.
 */
import { CodedError } from '../errors.js';

/** A call that did not get a response message: a gRPC error (status not decoded) or a failed connection. */
export class LeanCallError extends CodedError {
  override readonly name = 'LeanCallError';
  readonly code = 'E_ETCD_H2_CALL';
}

/**
 * A call that got no answer within its deadline: the server stalled or is overloaded. Not a LeanCallError:
 * whether the request was applied is unknown, so nothing may be retried or sent another way.
 */
export class LeanDeadlineError extends CodedError {
  override readonly name = 'LeanDeadlineError';
  readonly code = 'E_UNAVAILABLE';
}
