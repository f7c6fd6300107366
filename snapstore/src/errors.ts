/**
 * Typed snapstore errors with stable codes. Callers branch on `code`, never on message text.
 * Every message names the object, file or endpoint it is about.
 */
export type SnapStoreErrorCode =
  /** The object does not exist (fetch or delete of a missing key). */
  | 'E_NOT_FOUND'
  /** The object is protected by an immutability / retention policy and cannot be deleted yet. */
  | 'E_IMMUTABLE'
  /** The store could not be reached (DNS, connection refused, timeouts, 5xx after retries). */
  | 'E_UNREACHABLE'
  /** Credentials are missing, malformed or rejected. */
  | 'E_CREDENTIALS'
  /** The configuration is invalid (unknown provider, missing container, bad endpoint URL, ...). */
  | 'E_CONFIG'
  /** A snapshot name or key does not follow the upstream format. */
  | 'E_BAD_NAME'
  /** Stored bytes are not what they claim to be (truncated or corrupt compressed stream, bad hash). */
  | 'E_CORRUPT'
  /** The compression suffix or policy is not known. */
  | 'E_UNSUPPORTED_COMPRESSION'
  /** A save did not complete; nothing was committed. */
  | 'E_SAVE_FAILED'
  /** An encrypted object that none of the identities given can open (or no identity was given). */
  | 'E_NO_IDENTITY';

export class SnapStoreError extends Error {
  override readonly name = 'SnapStoreError';
  constructor(
    readonly code: SnapStoreErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export function isSnapStoreError(err: unknown, code?: SnapStoreErrorCode): err is SnapStoreError {
  return err instanceof SnapStoreError && (code === undefined || err.code === code);
}
