/**
 * The watch of every key from a revision on, over the bidirectional Watch stream (types and errors: watch.ts).
 * A broken stream is opened again from the revision after the last one delivered, so an etcd restart neither
 * loses nor repeats events; a compacted start revision rejects, a later compaction or refusal reaches onError.
 */
import type { DeltaEvent } from '../backup/delta-format.js';
import { nowRfc3339Nano } from '../backup/delta-format.js';
import { TOKEN_REFUSED, type AuthenticatedCalls } from './authenticated.js';
import { asBuffer } from './bytes.js';
import { EtcdError, isEtcdError } from './errors.js';
import { Event_EventType, type Event } from './gen/etcd/api/mvccpb/kv_pb.js';
import type { WatchRequest, WatchResponse } from './gen/etcd/api/etcdserverpb/rpc_pb.js';
import type { GrpcCall } from './grpc.js';
import { KV, Watch } from './methods.js';
import { CompactedRevisionError, WATCH_CANCEL_TIMEOUT_MS, type AllKeysWatch, type WatchHandlers } from './watch.js';

export type { AllKeysWatch, WatchHandlers } from './watch.js';

/** How long a broken watch waits before it connects again (etcd restarting). */
const WATCH_RETRY_MS = 500;

/** Every key: from `\0` to `\0` (etcd's "all keys from the key on" with the smallest key). */
// Memory of its own, not a slice of Node's shared Buffer pool: a constant keeps the whole slab alive.
const ALL_KEYS = Buffer.alloc(1);

type WatchCall = GrpcCall<WatchRequest>;

export async function watchAllKeys(
  calls: AuthenticatedCalls,
  startRevision: number,
  handlers: WatchHandlers,
  opts: { cancelTimeoutMs?: number } = {},
): Promise<AllKeysWatch> {
  const cancelTimeoutMs = opts.cancelTimeoutMs ?? WATCH_CANCEL_TIMEOUT_MS;
  let nextRevision = startRevision;
  let closed = false;
  let failed = false;
  let call: WatchCall | undefined;
  let watchId: bigint | undefined;
  let onCanceled: (() => void) | undefined;
  let retryTimer: NodeJS.Timeout | undefined;

  const fail = (err: EtcdError) => {
    if (failed || closed) return;
    failed = true;
    call?.cancel(err);
    handlers.onError(err);
  };
  const compactedError = (revision: number, compactRevision: bigint) =>
    new CompactedRevisionError(
      `watch from revision ${revision} failed: etcd compacted that revision (mvcc: required revision has been compacted; compacted at ${compactRevision})`,
    );

  /** Opens the stream from `nextRevision`; resolves once etcd confirmed the creation. */
  const establish = async (): Promise<void> => {
    const from = nextRevision;
    let established = false;
    let created!: () => void;
    let refused!: (err: EtcdError) => void;
    const confirmed = new Promise<void>((resolve, reject) => {
      created = resolve;
      refused = reject;
    });
    const onMessage = (res: WatchResponse) => {
      const header = res.header;
      if (res.created) {
        watchId = res.watchId;
        if (header) handlers.onHeader?.(Number(header.revision ?? 0n), (header.clusterId ?? 0n).toString());
        if (!res.canceled) {
          established = true;
          created();
        }
      }
      if (res.canceled) {
        onCanceled?.();
        if (closed || failed) return;
        const err =
          (res.compactRevision ?? 0n) > 0n
            ? compactedError(from, res.compactRevision!)
            : new EtcdError('E_ETCD_REQUEST', `watch from revision ${from} cancelled by etcd: ${res.cancelReason || 'no reason given'}`);
        // Before the creation is confirmed the caller gets the refusal; after, onError does.
        if (established) fail(err);
        else refused(err);
        return;
      }
      if (closed || res.created) return;
      if (header) handlers.onHeader?.(Number(header.revision ?? 0n), (header.clusterId ?? 0n).toString());
      if (!res.events?.length) return;
      const events = toDeltaEvents(res.events);
      nextRevision = events[events.length - 1]!.modRevision + 1;
      handlers.onEvents(events, Number(header?.revision ?? 0n));
    };
    const c = await calls.open(Watch.watch, onMessage);
    call = c;
    c.send({ createRequest: { key: ALL_KEYS, rangeEnd: ALL_KEYS, startRevision: BigInt(from) } });
    c.done.then(
      () => lost(c, new EtcdError('E_ETCD_UNAVAILABLE', 'the watch stream ended')),
      (err: EtcdError) => lost(c, err),
    );
    c.done.catch(refused);
    await confirmed;
  };
  /** A stream that ended on its own: connect again unless etcd refused the watch (auth, closed client). */
  const lost = (c: WatchCall, err: EtcdError) => {
    if (closed || failed || call !== c) return;
    if (
      (err.code === 'E_ETCD_AUTH' && !TOKEN_REFUSED.test(err.message)) ||
      err.code === 'E_ETCD_CLOSED' ||
      err.code === 'E_ETCD_COMPACTED'
    ) {
      fail(new EtcdError(err.code, `watch from revision ${startRevision} failed: ${err.message}`, { cause: err }));
      return;
    }
    if (TOKEN_REFUSED.test(err.message)) calls.forgetToken();
    retryTimer = setTimeout(() => {
      if (closed || failed) return;
      establish().catch((e: unknown) => {
        if (isEtcdError(e) && (e.code === 'E_ETCD_UNAVAILABLE' || e.code === 'E_ETCD_TIMEOUT')) lost(c, e);
        else fail(isEtcdError(e) ? e : new EtcdError('E_ETCD_REQUEST', String(e)));
      });
    }, WATCH_RETRY_MS);
  };

  await assertRevisionAvailable(calls, startRevision);
  try {
    await establish();
  } catch (err) {
    failed = true;
    call?.cancel();
    throw err;
  }
  return {
    close: async () => {
      if (closed) return;
      failed = true;
      clearTimeout(retryTimer);
      const c = call;
      const confirmed = new Promise<void>((resolve) => (onCanceled = resolve));
      if (c && watchId !== undefined) c.send({ cancelRequest: { watchId } });
      // Bounded: an etcd that hangs never confirms the cancel, which must not hold up a shutdown.
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, cancelTimeoutMs);
        timer.unref();
      });
      await Promise.race([confirmed, bound, c?.done.catch(() => undefined)]);
      clearTimeout(timer);
      closed = true;
      c?.cancel();
    },
  };
}

/**
 * The response's events in the delta format, stamped with the receive time. Keys and values are views of the
 * response message (see WatchHandlers.onEvents): copying them here cost an allocation and a copy per event at
 * thousands of events a second, and the one consumer copies what it keeps.
 */
function toDeltaEvents(watched: readonly Event[]): DeltaEvent[] {
  const time = nowRfc3339Nano();
  const events: DeltaEvent[] = new Array<DeltaEvent>(watched.length);
  for (let i = 0; i < watched.length; i++) {
    const e = watched[i]!;
    const kv = e.kv;
    events[i] = {
      type: e.type === Event_EventType.DELETE ? 'DELETE' : 'PUT',
      key: asBuffer(kv?.key ?? ALL_KEYS.subarray(0, 0)),
      value: asBuffer(kv?.value ?? ALL_KEYS.subarray(0, 0)),
      createRevision: Number(kv?.createRevision ?? 0n),
      modRevision: Number(kv?.modRevision ?? 0n),
      version: Number(kv?.version ?? 0n),
      lease: kv?.lease ? kv.lease.toString() : '0',
      time,
    };
  }
  return events;
}

/**
 * etcd confirms a watch from a compacted revision before it cancels it; a read at the revision tells at once,
 * so the caller gets the refusal rather than onError.
 */
async function assertRevisionAvailable(calls: AuthenticatedCalls, revision: number): Promise<void> {
  try {
    await calls.unary(KV.range, { key: Buffer.from('foo'), revision: BigInt(revision) });
  } catch (err) {
    if (isEtcdError(err, 'E_ETCD_COMPACTED')) {
      throw new CompactedRevisionError(
        `watch from revision ${revision} failed: etcd compacted that revision (mvcc: required revision has been compacted)`,
      );
    }
    // A future revision is fine for a watch: it waits for it.
    if (!(isEtcdError(err) && /future revision/i.test(err.message))) throw err;
  }
}
