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

/** The codes a failed store request can end in; which one drives backoff, metrics and what an operator fixes. */
export type StoreFailureCode = 'E_NOT_FOUND' | 'E_CREDENTIALS' | 'E_IMMUTABLE' | 'E_UNREACHABLE' | 'E_CONFIG';

/** What a provider knows about one failed request, in terms every SDK can supply. */
export interface StoreFailure {
  /** The final HTTP status, after the SDK's own retries; undefined when no answer arrived. */
  status?: number | undefined;
  /** The vendor's error code from the answer (`NoSuchBucket`, `BlobImmutableDueToPolicy`, ...). */
  vendorCode?: string | undefined;
}

/**
 * The one rule for every provider. A provider's `vendor` table (vendor error code → our code) wins, since
 * a vendor code says more than its status (S3's `NoSuchBucket` is a 404 that means a wrong configuration).
 * Then the status: 404 → E_NOT_FOUND; 401, 403 → E_CREDENTIALS; 5xx, 408 (request timeout) and 429 (too
 * many requests) → E_UNREACHABLE, transient, as every SDK's retry policy treats them; any other 4xx →
 * E_CONFIG, the request itself is wrong. No status (network error, timeout, abort, a body cut short) →
 * E_UNREACHABLE.
 */
export function classifyStoreFailure(f: StoreFailure, vendor: ReadonlyMap<string, StoreFailureCode> = NO_VENDOR_CODES): StoreFailureCode {
  const byVendor = f.vendorCode === undefined ? undefined : vendor.get(f.vendorCode);
  if (byVendor) return byVendor;
  const s = f.status;
  if (s === undefined) return 'E_UNREACHABLE';
  if (s === 404) return 'E_NOT_FOUND';
  if (s === 401 || s === 403) return 'E_CREDENTIALS';
  if (s >= 500 || s === 408 || s === 429) return 'E_UNREACHABLE';
  if (s >= 400) return 'E_CONFIG';
  // 1xx and 3xx are not failures any SDK hands back on its own; an answer we cannot use is a broken endpoint.
  return 'E_UNREACHABLE';
}

const NO_VENDOR_CODES: ReadonlyMap<string, StoreFailureCode> = new Map();
