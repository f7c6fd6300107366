import type { Etcd3, Watcher } from 'etcd3';
import type { DeltaEvent } from '../backup/delta-format.js';
import { nowRfc3339Nano } from '../backup/delta-format.js';
import { EtcdError, toEtcdError } from './errors.js';

interface RawKv {
  key: Buffer;
  value: Buffer;
  create_revision: string;
  mod_revision: string;
  version: string;
  lease: string;
}
interface RawEvent {
  type: 'Put' | 'Delete';
  kv: RawKv;
}
interface RawWatchResponse {
  header: { revision: string; cluster_id?: string };
  events: RawEvent[];
}

export interface WatchHandlers {
  /** Called synchronously for each watch response, events in revision order, stamped with receive time. */
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

/** Converts etcd3's event (64-bit numbers as decimal strings) to our delta event. */
export function toDeltaEvent(ev: RawEvent, time: string): DeltaEvent {
  return {
    type: ev.type === 'Delete' ? 'DELETE' : 'PUT',
    key: ev.kv.key,
    value: ev.kv.value ?? Buffer.alloc(0),
    createRevision: Number(ev.kv.create_revision ?? 0),
    modRevision: Number(ev.kv.mod_revision ?? 0),
    version: Number(ev.kv.version ?? 0),
    lease: ev.kv.lease ?? '0',
    time,
  };
}

/**
 * Watches every key from `startRevision` on (etcd's `\0`..`\0` range, as upstream's Watch("", WithPrefix)).
 * The etcd3 client re-establishes a broken watch from the last revision it delivered, so an etcd
 * restart does not lose or repeat events; a compacted start revision ends the watch with an error.
 */
export async function watchAllKeys(
  client: Etcd3,
  startRevision: number,
  handlers: WatchHandlers,
  opts: { cancelTimeoutMs?: number } = {},
): Promise<AllKeysWatch> {
  const cancelTimeoutMs = opts.cancelTimeoutMs ?? WATCH_CANCEL_TIMEOUT_MS;
  await assertRevisionAvailable(client, startRevision);
  let failed = false;
  let closed = false;
  const watcher: Watcher = await client
    .watch()
    .inRange({ start: Buffer.from([0]), end: Buffer.from([0]) })
    .startRevision(String(startRevision))
    .create();
  const header = (res: unknown): void => {
    const h = (res as Partial<RawWatchResponse> | undefined)?.header;
    if (h?.revision !== undefined) handlers.onHeader?.(Number(h.revision), h.cluster_id);
  };
  watcher.on('connected', header);
  watcher.on('data', (res) => {
    // Events etcd sent before it confirms the cancel still arrive while close() waits, and belong to the
    // buffer (the last delta on shutdown includes them); nothing arrives after close() returned, even when
    // the confirmation never came.
    if (closed) return;
    const r = res as unknown as RawWatchResponse;
    header(r);
    if (!r.events || r.events.length === 0) return;
    const time = nowRfc3339Nano();
    handlers.onEvents(
      r.events.map((e) => toDeltaEvent(e, time)),
      Number(r.header.revision),
    );
  });
  watcher.on('error', (err) => {
    if (failed) return;
    failed = true;
    handlers.onError(new EtcdError(toEtcdError(err).code, `watch from revision ${startRevision} failed: ${err.message || err.name}`));
  });
  return {
    close: async () => {
      failed = true;
      // Bounded: etcd3 waits for etcd to confirm the cancel, and an etcd that hangs (stopped, out of disk
      // I/O) never does, which held the sidecar's shutdown forever. No event is delivered after close()
      // (`closed`), and closing the client ends the stream.
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, cancelTimeoutMs);
        timer.unref();
      });
      await Promise.race([watcher.cancel().catch(() => undefined), bound]);
      clearTimeout(timer);
      closed = true;
    },
  };
}

export class CompactedRevisionError extends EtcdError {
  override readonly name: string = 'CompactedRevisionError';
  constructor(message: string, options?: ErrorOptions) {
    super('E_ETCD_COMPACTED', message, options);
  }
}

/**
 * A watch from a compacted revision is cancelled by etcd, but the etcd3 client does not always pass that
 * on (with other watchers on the same stream it can stay silent). A read at the revision tells for sure.
 */
async function assertRevisionAvailable(client: Etcd3, revision: number): Promise<void> {
  try {
    await client.get('foo').revision(String(revision)).exec();
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    if (/compacted/i.test(msg)) {
      throw new CompactedRevisionError(
        `watch from revision ${revision} failed: etcd compacted that revision (mvcc: required revision has been compacted)`,
        { cause: err },
      );
    }
    // A future revision is fine for a watch: it waits for it.
    if (!/future revision/i.test(msg)) throw err;
  }
}
