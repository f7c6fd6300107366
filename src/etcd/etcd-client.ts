/**
 * The project's one way to talk to etcd. `EtcdClient` lists exactly the calls the project makes, in its own
 * types (64-bit ids as hex strings, revisions and sizes as numbers, errors as EtcdError), so the rest of
 * the code does not depend on the client library or reach into its internals, and unit tests fake this
 * interface instead of the library. `Etcd3Client` is the implementation on the etcd3 library; the
 * library's workarounds (auth on the snapshot stream, cancelling a call, raw compaction) live here.
 */
import type { Etcd3, IMember, IStatusResponse } from 'etcd3';
import type { Logger } from '@etcdbrctl/snapstore';
import { toEtcdError } from './errors.js';
import { compact, currentRevision } from './ops.js';
import { openReplayTxns, type ReplayOp, type ReplayTxns, type ReplayTxnsOptions } from './replay-txns.js';
import { watchAllKeys, type AllKeysWatch, type WatchHandlers } from './watch.js';

export type { AllKeysWatch, WatchHandlers } from './watch.js';
export type { ReplayTxns } from './replay-txns.js';

export interface CallOptions {
  /** The call fails with E_ETCD_TIMEOUT when etcd has not answered within this; no deadline when absent. */
  timeoutMs?: number;
}

/** Maintenance.Status of the member that answered. */
export interface EtcdStatus {
  /** Hex id of the member that answered. */
  memberId: string;
  /** Hex cluster id. */
  clusterId: string;
  /** The answering member's current revision. */
  revision: number;
  /** Hex id of the member this one believes leads; '0' when it knows no leader. */
  leaderId: string;
  raftTerm: number;
  raftIndex: number;
  isLearner: boolean;
  /** Bytes of the backend file. */
  dbSize: number;
  /** Bytes of the backend in use (the rest is free pages a defragmentation returns). */
  dbSizeInUse: number;
  /** The cluster protocol version, e.g. `3.5.0`. */
  version: string;
}

export interface EtcdMember {
  /** Hex member id. */
  id: string;
  /** Empty until the member has started once. */
  name: string;
  peerUrls: string[];
  /** Empty until the member has started once and published itself. */
  clientUrls: string[];
  isLearner: boolean;
}

export interface EtcdMemberList {
  /** Hex id of the member that answered. */
  memberId: string;
  /** Hex cluster id. */
  clusterId: string;
  members: EtcdMember[];
}

export interface SnapshotChunk {
  /** The next part of the snapshot file (empty when a message carried none). */
  blob: Buffer;
  /** The revision the snapshot holds, from the message header (etcd 3.5+, first message); 0 when absent. */
  revision: number;
}

/** Maintenance.Snapshot as it streams: iterate once; cancel() ends it early (and is harmless after the end). */
export interface SnapshotStream extends AsyncIterable<SnapshotChunk> {
  cancel(): void;
}

export interface EtcdClient {
  /** Maintenance.Status of the member behind the client's (first reachable) endpoint. */
  status(opts?: CallOptions): Promise<EtcdStatus>;
  /**
   * Maintenance.Defragment. Aborting `signal` cancels the call at once (etcd finishes the defragmentation
   * anyway), so a pending one does not hold up a shutdown.
   */
  defragment(opts?: CallOptions & { signal?: AbortSignal }): Promise<void>;
  /** Compacts the key space at `revision`; `physical` (default) waits until the backend has applied it. */
  compact(revision: number, opts?: CallOptions & { physical?: boolean }): Promise<void>;
  /** etcd's current revision, from a linearizable one-key read (only a quorate cluster answers it). */
  currentRevision(timeoutMs: number): Promise<number>;
  /** The value of `key`, undefined when there is none. */
  get(key: string, opts?: CallOptions): Promise<Buffer | undefined>;
  put(key: string, value: string | Buffer, opts?: CallOptions): Promise<void>;
  memberList(opts?: CallOptions & { linearizable?: boolean }): Promise<EtcdMemberList>;
  /** Adds a member (as a learner with `learner`); resolves with the new member. */
  memberAdd(peerUrls: readonly string[], opts?: CallOptions & { learner?: boolean }): Promise<EtcdMember>;
  memberRemove(memberId: string, opts?: CallOptions): Promise<void>;
  memberPromote(memberId: string, opts?: CallOptions): Promise<void>;
  memberUpdate(memberId: string, peerUrls: readonly string[], opts?: CallOptions): Promise<void>;
  /** Opens Maintenance.Snapshot; `timeoutMs` bounds the whole stream. */
  snapshot(opts?: CallOptions): Promise<SnapshotStream>;
  /**
   * Watches every key from `startRevision` on (see watch.ts): a compacted start revision rejects with
   * CompactedRevisionError, later failures reach `handlers.onError`.
   */
  watchAllKeys(startRevision: number, handlers: WatchHandlers, opts?: { cancelTimeoutMs?: number }): Promise<AllKeysWatch>;
  /** Ends every connection and stream; later calls fail with E_ETCD_CLOSED. */
  close(): void;
}

/** A client of an etcd this process started itself, which the restore also replays transactions into. */
export interface LocalEtcdClient extends EtcdClient {
  /** The replay's transaction path (replay-txns.ts) to this etcd. */
  openReplayTxns(logger: Logger, opts?: ReplayTxnsOptions): Promise<ReplayTxns>;
}

const EMPTY = Buffer.alloc(0);

function deadline(opts: CallOptions | undefined): { deadline: Date } | undefined {
  return opts?.timeoutMs !== undefined ? { deadline: new Date(Date.now() + opts.timeoutMs) } : undefined;
}

/** etcd3 hands 64-bit ids over as decimal strings; the project (as etcd's own tools) writes them in hex. */
function hex(id: string | number | undefined): string {
  return BigInt(id ?? 0).toString(16);
}

/** A hex id as etcd3 takes it (decimal). */
function decimal(hexId: string): string {
  return BigInt(`0x${hexId}`).toString();
}

function toMember(m: IMember): EtcdMember {
  return {
    id: hex(m.ID),
    name: m.name ?? '',
    peerUrls: [...(m.peerURLs ?? [])],
    clientUrls: [...(m.clientURLs ?? [])],
    isLearner: Boolean((m as { isLearner?: boolean }).isLearner),
  };
}

/** etcd3's typings miss the fields etcd added in 3.4 (its .proto has them, so they are decoded). */
type RawStatus = IStatusResponse & { raftIndex?: string; dbSizeInUse?: string; isLearner?: boolean };

/** Runs one call, turning what it throws into an EtcdError. */
async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw toEtcdError(err);
  }
}

interface RawSnapshotMessage {
  blob?: Buffer;
  header?: { revision?: string | number } | null;
}
/** grpc-js's ClientReadableStream: async-iterable and cancellable. */
type RawSnapshotStream = AsyncIterable<RawSnapshotMessage> & { cancel(): void; on(event: 'error', listener: () => void): unknown };
interface PoolInternals {
  withConnection<T>(service: 'Maintenance', fn: (args: { client: unknown; metadata: unknown }) => T): Promise<T>;
}

type GrpcCallOptions = NonNullable<Parameters<Etcd3['maintenance']['defragment']>[0]>;
type Interceptor = NonNullable<GrpcCallOptions['interceptors']>[number];

/**
 * etcd3 does not hand out its gRPC calls; a gRPC interceptor that passes the call through unchanged gets
 * hold of it, so it can be cancelled (status CANCELLED) from outside.
 */
function cancellableCall(): { interceptor: Interceptor; cancel(): void } {
  let call: { cancelWithStatus(code: number, details: string): void } | undefined;
  let cancelled = false;
  const GRPC_CANCELLED = 1;
  const interceptor: Interceptor = (options, nextCall) => {
    const c = nextCall(options);
    call = c;
    if (cancelled) queueMicrotask(() => c.cancelWithStatus(GRPC_CANCELLED, 'stopped'));
    // nextCall yields grpc-js's InterceptingCall typed as its interface; passing it on unchanged is the
    // documented pass-through interceptor.
    return c as ReturnType<Interceptor>;
  };
  return {
    interceptor,
    cancel() {
      cancelled = true;
      call?.cancelWithStatus(GRPC_CANCELLED, 'stopped');
    },
  };
}

/** EtcdClient on one etcd3 client, which it owns: close() closes it. */
export class Etcd3Client implements EtcdClient {
  constructor(protected readonly etcd3: Etcd3) {}

  async status(opts?: CallOptions): Promise<EtcdStatus> {
    const res = (await call(() => this.etcd3.maintenance.status(deadline(opts)))) as RawStatus;
    return {
      memberId: hex(res.header.member_id),
      clusterId: hex(res.header.cluster_id),
      revision: Number(res.header.revision ?? 0),
      leaderId: hex(res.leader),
      raftTerm: Number(res.raftTerm ?? 0),
      raftIndex: Number(res.raftIndex ?? 0),
      isLearner: Boolean(res.isLearner),
      dbSize: Number(res.dbSize ?? 0),
      dbSizeInUse: Number(res.dbSizeInUse ?? 0),
      version: res.version ?? '',
    };
  }

  async defragment(opts: CallOptions & { signal?: AbortSignal } = {}): Promise<void> {
    const { signal } = opts;
    const cancel = signal ? cancellableCall() : undefined;
    const onAbort = () => cancel?.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) onAbort();
    try {
      await call(() => this.etcd3.maintenance.defragment({ ...deadline(opts), ...(cancel ? { interceptors: [cancel.interceptor] } : {}) }));
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  compact(revision: number, opts: CallOptions & { physical?: boolean } = {}): Promise<void> {
    return call(() => compact(this.etcd3, revision, opts));
  }

  currentRevision(timeoutMs: number): Promise<number> {
    return call(() => currentRevision(this.etcd3, timeoutMs));
  }

  get(key: string, opts?: CallOptions): Promise<Buffer | undefined> {
    return call(async () => (await this.etcd3.get(key).options(deadline(opts)).buffer()) ?? undefined);
  }

  async put(key: string, value: string | Buffer, opts?: CallOptions): Promise<void> {
    await call(() => this.etcd3.put(key).value(value).options(deadline(opts)).exec());
  }

  async memberList(opts: CallOptions & { linearizable?: boolean } = {}): Promise<EtcdMemberList> {
    const req = opts.linearizable !== undefined ? { linearizable: opts.linearizable } : {};
    const res = await call(() => this.etcd3.cluster.memberList(req, deadline(opts)));
    return { memberId: hex(res.header.member_id), clusterId: hex(res.header.cluster_id), members: res.members.map(toMember) };
  }

  async memberAdd(peerUrls: readonly string[], opts: CallOptions & { learner?: boolean } = {}): Promise<EtcdMember> {
    const res = await call(() =>
      this.etcd3.cluster.memberAdd({ peerURLs: [...peerUrls], isLearner: opts.learner ?? false }, deadline(opts)),
    );
    return toMember(res.member);
  }

  async memberRemove(memberId: string, opts?: CallOptions): Promise<void> {
    await call(() => this.etcd3.cluster.memberRemove({ ID: decimal(memberId) }, deadline(opts)));
  }

  async memberPromote(memberId: string, opts?: CallOptions): Promise<void> {
    await call(() => this.etcd3.cluster.memberPromote({ ID: decimal(memberId) }, deadline(opts)));
  }

  async memberUpdate(memberId: string, peerUrls: readonly string[], opts?: CallOptions): Promise<void> {
    await call(() => this.etcd3.cluster.memberUpdate({ ID: decimal(memberId), peerURLs: [...peerUrls] }, deadline(opts)));
  }

  /**
   * etcd3 1.1.2's maintenance.snapshot() passes the auth metadata where grpc-js expects the request message
   * (server-streaming calls take request, metadata, options), so the token never reaches etcd and an etcd
   * with authentication enabled refuses the snapshot. We make the same call through etcd3's connection pool
   * (which supplies the token) with the arguments in grpc-js order.
   */
  async snapshot(opts?: CallOptions): Promise<SnapshotStream> {
    const pool = (this.etcd3 as unknown as { pool: PoolInternals }).pool;
    const stream = await call(() =>
      pool.withConnection('Maintenance', ({ client, metadata }) =>
        (client as { snapshot(request: object, md: unknown, options: object): RawSnapshotStream }).snapshot(
          {},
          metadata,
          deadline(opts) ?? {},
        ),
      ),
    );
    // Errors reach the reader through the async iterator; this only keeps an early one from being unhandled.
    stream.on('error', () => undefined);
    return {
      cancel: () => stream.cancel(),
      [Symbol.asyncIterator]: () => {
        const it = stream[Symbol.asyncIterator]();
        return {
          next: async (): Promise<IteratorResult<SnapshotChunk>> => {
            const r = await call(() => it.next());
            if (r.done) return { done: true, value: undefined };
            return { done: false, value: { blob: r.value.blob ?? EMPTY, revision: Number(r.value.header?.revision ?? 0) } };
          },
          // A loop that stops early (break, throw) ends the stream rather than leave etcd sending.
          return: async (): Promise<IteratorResult<SnapshotChunk>> => {
            stream.cancel();
            return { done: true, value: undefined };
          },
        };
      },
    };
  }

  watchAllKeys(startRevision: number, handlers: WatchHandlers, opts?: { cancelTimeoutMs?: number }): Promise<AllKeysWatch> {
    return call(() => watchAllKeys(this.etcd3, startRevision, handlers, opts));
  }

  close(): void {
    this.etcd3.close();
  }
}

/** etcd3's KV RPC client; its public API has no raw multi-op transaction with our own op list. */
interface RawTxnKv {
  txn(
    req: { compare: unknown[]; success: readonly ReplayOp[]; failure: unknown[] },
    options?: { deadline: Date },
  ): Promise<{ header: { revision: string } }>;
}

/** Etcd3Client of a local etcd, which knows its URL for the replay's lean transaction path. */
export class LocalEtcd3Client extends Etcd3Client implements LocalEtcdClient {
  constructor(
    etcd3: Etcd3,
    private readonly clientUrl: string,
  ) {
    super(etcd3);
  }

  openReplayTxns(logger: Logger, opts?: ReplayTxnsOptions): Promise<ReplayTxns> {
    const kv = (this.etcd3 as unknown as { kv: RawTxnKv }).kv;
    return openReplayTxns(
      this.clientUrl,
      {
        currentRevision: (timeoutMs) => currentRevision(this.etcd3, timeoutMs),
        txn: async (ops, timeoutMs) =>
          Number(
            (await kv.txn({ compare: [], success: ops, failure: [] }, { deadline: new Date(Date.now() + timeoutMs) })).header.revision,
          ),
      },
      logger,
      opts,
    );
  }
}
