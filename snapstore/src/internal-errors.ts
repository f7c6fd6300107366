/**
 * Errors made inside the package that never leave it as they are: a provider, codec or credential reader
 * wraps each into a SnapStoreError (as its `cause`) before it reaches a caller. Typed so that code inside the
 * package branches on a class or code, not on message text. Not exported from the package index: callers only
 * ever see SnapStoreError.
 */

/** What went wrong, for branching inside the package; the message says it for people. */
export type InternalErrorCode =
  /** An operation was cancelled through its AbortSignal. */
  | 'E_ABORTED'
  /** An attempt took longer than its deadline. */
  | 'E_TIMEOUT'
  /** A store answered without what the protocol promises (no body, no upload id, no ETag). */
  | 'E_BAD_ANSWER'
  /** An object needs more parts or blocks than the store allows at this part size. */
  | 'E_TOO_LARGE'
  /** Input the package was handed is not what it expects (not bytes, not an age key, not a URL it takes). */
  | 'E_BAD_INPUT'
  /** A compressed or encrypted stream is damaged or cut short. */
  | 'E_CORRUPT_STREAM'
  /** A local store path names something that is not a regular file. */
  | 'E_NOT_A_FILE'
  /** An upload part could not be written to the snapstore temp directory. */
  | 'E_SPOOL'
  /** A multipart upload failed; the cause and where it came from are attached. */
  | 'E_UPLOAD_FAILED'
  /** An invariant of the package's own bookkeeping broke: a bug, reported instead of using unbounded memory. */
  | 'E_INVARIANT';

export class InternalError extends Error {
  override readonly name: string = 'InternalError';
  constructor(
    readonly code: InternalErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * Named like the platform's AbortError (DOMException), which the SDKs throw too: the providers' abort checks
 * and retry decisions read the name, so both kinds take the same path.
 */
export class AbortError extends InternalError {
  override readonly name = 'AbortError';
  constructor(message = 'The operation was aborted', options?: { cause?: unknown }) {
    super('E_ABORTED', message, options);
  }
}

/** Named like the platform's TimeoutError: the network-error classification counts it as "unreachable", retryable. */
export class TimeoutError extends InternalError {
  override readonly name = 'TimeoutError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('E_TIMEOUT', message, options);
  }
}
