/** The one error a multipart upload (multipart-upload.ts) rejects with: what failed, and where it came from. */
import { InternalError } from '../internal-errors.js';
import { describeError } from './common.js';

/**
 * Where an upload failed: its input, the caller's signal, the store (a request it refused or never
 * answered), or keeping a part (writing it to the snapstore temp directory).
 */
export type UploadFailureOrigin = 'input' | 'aborted' | 'store' | 'spool';

/** Why an upload failed; `cause` is the original error, `origin` where it came from. */
export class UploadFailedError extends InternalError {
  override readonly name = 'UploadFailedError';
  constructor(
    readonly origin: UploadFailureOrigin,
    override readonly cause: unknown,
  ) {
    super('E_UPLOAD_FAILED', describeError(cause), { cause });
  }
}
