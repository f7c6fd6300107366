/**
 * The all-keys watch's types and errors; watch-stream.ts implements it.
 */
import type { DeltaEvent } from '../backup/delta-format.js';
import { EtcdError } from './errors.js';

export interface WatchHandlers {
  /**
   * Called synchronously for each watch response, events in revision order, stamped with receive time. The
   * events' keys and values are views of the response message: copy what is kept beyond the call (the delta
   * buffer does), or it keeps the whole message alive.
   */
  onEvents(events: DeltaEvent[], headerRevision: number): void;
  /** The watch ended with an error (e.g. compacted revision); it will not deliver more events. */
  onError(err: Error): void;
  /**
   * Every response's header, before its events: the creation of the watch (again after each reconnect,
   * which is where an etcd restored to an older revision shows) and every update. `clusterId` is decimal.
   */
  onHeader?(revision: number, clusterId: string | undefined): void;
}

/** How long close() waits for etcd to confirm that the watch is cancelled. */
export const WATCH_CANCEL_TIMEOUT_MS = 5_000;

export interface AllKeysWatch {
  close(): Promise<void>;
}

export class CompactedRevisionError extends EtcdError {
  override readonly name: string = 'CompactedRevisionError';
  constructor(message: string, options?: ErrorOptions) {
    super('E_ETCD_COMPACTED', message, options);
  }
}
