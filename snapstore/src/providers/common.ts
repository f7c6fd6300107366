/**
 * Small helpers shared by the providers: error classification and wrapping, abort handling.
 * Nothing here knows a particular SDK.
 */
import { SnapStoreError, isSnapStoreError } from '../errors.js';
import { AbortError, InternalError } from '../internal-errors.js';

/** Node and SDK error codes that mean "the endpoint could not be reached", not "it said no". */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ECONNABORTED',
  'ERR_SOCKET_CONNECTION_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
  'TimeoutError',
  'RequestTimeout',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** Walks `cause` chains and AggregateErrors (Node's happy-eyeballs connect) to find a network error. */
export function isNetworkError(err: unknown, depth = 0): boolean {
  if (depth > 5 || err === null || typeof err !== 'object') return false;
  const e = err as { code?: unknown; name?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return true;
  if (typeof e.name === 'string' && NETWORK_CODES.has(e.name)) return true;
  if (Array.isArray(e.errors) && e.errors.some((x) => isNetworkError(x, depth + 1))) return true;
  return isNetworkError(e.cause, depth + 1);
}

export function isAbortError(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || (err as { code?: unknown }).code === 'ABORT_ERR');
}

/** One-line description of an unknown error for messages. */
export function describeError(err: unknown): string {
  // The package's own errors say everything in their message; their code is for branching only.
  if (err instanceof InternalError) return err.message || err.name;
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    const msg = err.message || err.name;
    return typeof code === 'string' && !msg.includes(code) ? `${code}: ${msg}` : msg;
  }
  return String(err);
}

/** Save failures keep an existing SnapStoreError (E_UNREACHABLE, E_CREDENTIALS, ...) and wrap the rest. */
export function saveFailed(err: unknown, what: string): SnapStoreError {
  if (isSnapStoreError(err)) return err;
  const reason = isAbortError(err) ? 'aborted' : describeError(err);
  return new SnapStoreError('E_SAVE_FAILED', `saving ${what} failed, nothing was committed: ${reason}`, {
    cause: err,
  });
}

export function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason;
  return reason === undefined ? new AbortError() : new AbortError(`aborted: ${String(reason)}`);
}
