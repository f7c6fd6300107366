/**
 * The streamed consistency check of an etcd backend (a full snapshot as it downloads, src/verifier/verify.ts):
 * the generic bbolt check (src/bbolt/stream-check.ts) watching what tells etcd's store revision, and that
 * revision read from its summaries once the file checked out.
 */
import { BoltError } from '../bbolt/db.js';
import type { CheckResult } from '../bbolt/check.js';
import { BoltStreamChecker, type StreamChecker } from '../bbolt/stream-check.js';
import { STORE_REVISION_WATCH, storeRevisionFromSummaries } from './summary-revision.js';

export type BackendCheckOutcome =
  /** The file could not be read as bbolt at all (no valid meta, or it ends inside the pages in use). */
  | { kind: 'unreadable'; error: BoltError }
  /** Checked; `revision` is etcd's store revision when the check is ok and the file is an etcd backend, `notEtcd` why it is not one. */
  | { kind: 'checked'; check: CheckResult; revision?: number; notEtcd?: BoltError };

export class BackendStreamChecker implements StreamChecker<BackendCheckOutcome> {
  private readonly bolt: BoltStreamChecker;

  constructor(what: string, maxProblems = 1000) {
    this.bolt = new BoltStreamChecker(what, maxProblems, STORE_REVISION_WATCH);
  }

  write(chunk: Buffer): void | Promise<void> {
    return this.bolt.write(chunk);
  }

  async finish(): Promise<BackendCheckOutcome> {
    const outcome = await this.bolt.finish();
    if (outcome.kind === 'unreadable') return outcome;
    const { check, summaries } = outcome;
    if (summaries === undefined) return { kind: 'checked', check };
    try {
      return { kind: 'checked', check, revision: storeRevisionFromSummaries(summaries) };
    } catch (err) {
      if (err instanceof BoltError) return { kind: 'checked', check, notEtcd: err };
      throw err;
    }
  }
}
