/**
 * EtcdClient on Node's own HTTP/2 client (grpc-channel.ts) with the messages encoded by hand (rpc-wire.ts):
 * no gRPC or protobuf library is loaded. Authentication as etcd's clientv3 does it: Auth/Authenticate with
 * the user's name and password gives a token that every call carries in its `token` header; a call refused
 * because the token is invalid or expired authenticates again once and is retried.
 */
import type { DeltaEvent } from '../backup/delta-format.js';
import { nowRfc3339Nano } from '../backup/delta-format.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type {
  CallOptions,
  EtcdClient,
  LocalEtcdClient,
  EtcdMember,
  EtcdKvHash,
  EtcdMemberList,
  EtcdStatus,
  LeaseTimeToLive,
  SnapshotChunk,
  SnapshotStream,
} from './etcd-client.js';
import { EtcdError, isEtcdError } from './errors.js';
import { GrpcChannel, type ChannelOptions, type GrpcCall, type StreamOptions } from './grpc-channel.js';
import { openReplayTxns, type ReplayOp, type ReplayTxns, type ReplayTxnsOptions } from './replay-txns.js';
import * as wire from './rpc-wire.js';
import { encodeTxnRequest } from './txn-wire.js';
import { CompactedRevisionError, WATCH_CANCEL_TIMEOUT_MS, type AllKeysWatch, type WatchHandlers } from './watch.js';

const KV = '/etcdserverpb.KV';
const MAINTENANCE = '/etcdserverpb.Maintenance';
const CLUSTER = '/etcdserverpb.Cluster';
const WATCH = '/etcdserverpb.Watch/Watch';
const AUTHENTICATE = '/etcdserverpb.Auth/Authenticate';
const LEASE = '/etcdserverpb.Lease';

/**
 * Snapshot messages (32 KiB each from etcd) read ahead of the consumer before reading pauses; the receive
 * window (client.ts) holds more behind them. Small for the same reason as that window.
 */
const SNAPSHOT_QUEUE_MESSAGES = 16;

/** How long a broken watch waits before it connects again (etcd restarting). */
const WATCH_RETRY_MS = 500;

export interface Credentials {
  username: string;
  password: string;
}

const hex = (id: bigint): string => id.toString(16);

function toMember(m: wire.Member): EtcdMember {
  return { id: hex(m.id), name: m.name, peerUrls: m.peerUrls, clientUrls: m.clientUrls, isLearner: m.isLearner };
}

/** etcd's answers to a stale or unknown token (etcdserver/api/v3rpc/rpctypes). */
const TOKEN_REFUSED = /invalid auth token|auth token is expired|auth: revision in header is old/i;

export class H2EtcdClient implements EtcdClient {
  protected readonly channel: GrpcChannel;
  private token: Promise<string> | undefined;

  constructor(
    channel: ChannelOptions,
    private readonly credentials?: Credentials,
  ) {
    this.channel = new GrpcChannel(channel);
  }

  /** Metadata of a call: the auth token when credentials are configured. */
  private async metadata(opts: StreamOptions, renew = false): Promise<Record<string, string> | undefined> {
    if (!this.credentials) return undefined;
    if (renew) this.token = undefined;
    const { username, password } = this.credentials;
    this.token ??= this.channel
      .unary(AUTHENTICATE, wire.encodeAuthenticateRequest(username, password), { timeoutMs: opts.timeoutMs, signal: opts.signal })
      .then(wire.decodeAuthenticateResponse)
      .catch((err: unknown) => {
        this.token = undefined;
        throw isEtcdError(err) && /authentication failed/i.test(err.message) ? new EtcdError('E_ETCD_AUTH', err.message) : err;
      });
    return { token: await this.token };
  }

  /** Opens a call with the token; a refused token is renewed once (the call had sent nothing yet then). */
  protected async open(path: string, onMessage: (msg: Buffer) => void, opts: StreamOptions, first: Buffer): Promise<GrpcCall> {
    const call = await this.channel.open(path, onMessage, { ...opts, metadata: await this.metadata(opts) });
    call.write(first);
    return call;
  }

  protected async unary(path: string, request: Buffer, opts: StreamOptions = {}): Promise<Buffer> {
    try {
      return await this.channel.unary(path, request, { ...opts, metadata: await this.metadata(opts) });
    } catch (err) {
      if (!this.credentials || !isEtcdError(err) || !TOKEN_REFUSED.test(err.message)) throw err;
      return this.channel.unary(path, request, { ...opts, metadata: await this.metadata(opts, true) });
    }
  }

  async status(opts?: CallOptions): Promise<EtcdStatus> {
    const s = wire.decodeStatusResponse(await this.unary(`${MAINTENANCE}/Status`, wire.EMPTY_REQUEST, opts));
    return {
      memberId: hex(s.header.memberId),
      clusterId: hex(s.header.clusterId),
      revision: s.header.revision,
      leaderId: hex(s.leader),
      raftTerm: s.raftTerm,
      raftIndex: s.raftIndex,
      isLearner: s.isLearner,
      dbSize: s.dbSize,
      dbSizeInUse: s.dbSizeInUse,
      version: s.version,
    };
  }

  async defragment(opts: CallOptions & { signal?: AbortSignal } = {}): Promise<void> {
    await this.unary(`${MAINTENANCE}/Defragment`, wire.EMPTY_REQUEST, opts);
  }

  async compact(revision: number, opts: CallOptions & { physical?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    await this.unary(`${KV}/Compact`, wire.encodeCompactionRequest(revision, opts.physical ?? true), opts);
  }

  /** A linearizable read of one key: its header carries the revision, and only a quorate cluster answers. */
  async hashKv(revision: number, opts: CallOptions & { signal?: AbortSignal } = {}): Promise<EtcdKvHash> {
    const r = wire.decodeHashKvResponse(await this.unary(`${MAINTENANCE}/HashKV`, wire.encodeHashKvRequest(revision), opts));
    return { hash: r.hash, compactRevision: r.compactRevision, headerRevision: r.header.revision };
  }

  async currentRevision(timeoutMs: number): Promise<number> {
    return wire.decodeRangeResponse(await this.unary(`${KV}/Range`, wire.encodeRangeRequest('foo'), { timeoutMs })).header.revision;
  }

  async get(key: string, opts?: CallOptions): Promise<Buffer | undefined> {
    return wire.decodeRangeResponse(await this.unary(`${KV}/Range`, wire.encodeRangeRequest(key), opts)).kvs[0]?.value;
  }

  async put(key: string, value: string | Buffer, opts?: CallOptions): Promise<void> {
    await this.unary(`${KV}/Put`, wire.encodePutRequest(key, value), opts);
  }

  async leaseTimeToLive(id: string, opts: CallOptions & { keys?: boolean } = {}): Promise<LeaseTimeToLive> {
    return wire.decodeLeaseTimeToLiveResponse(
      await this.unary(`${LEASE}/LeaseTimeToLive`, wire.encodeLeaseTimeToLiveRequest(id, opts.keys ?? false), opts),
    );
  }

  async memberList(opts: CallOptions & { linearizable?: boolean } = {}): Promise<EtcdMemberList> {
    const res = wire.decodeMemberListResponse(
      await this.unary(`${CLUSTER}/MemberList`, wire.encodeMemberListRequest(opts.linearizable ?? false), opts),
    );
    return { memberId: hex(res.header.memberId), clusterId: hex(res.header.clusterId), members: res.members.map(toMember) };
  }

  async memberAdd(peerUrls: readonly string[], opts: CallOptions & { learner?: boolean } = {}): Promise<EtcdMember> {
    const member = wire.decodeMemberAddResponse(
      await this.unary(`${CLUSTER}/MemberAdd`, wire.encodeMemberAddRequest(peerUrls, opts.learner ?? false), opts),
    );
    if (!member) throw new EtcdError('E_ETCD_REQUEST', 'MemberAdd: etcd answered without the new member');
    return toMember(member);
  }

  async memberRemove(memberId: string, opts?: CallOptions): Promise<void> {
    await this.unary(`${CLUSTER}/MemberRemove`, wire.encodeMemberIdRequest(wire.memberIdOf(memberId)), opts);
  }

  async memberPromote(memberId: string, opts?: CallOptions): Promise<void> {
    await this.unary(`${CLUSTER}/MemberPromote`, wire.encodeMemberIdRequest(wire.memberIdOf(memberId)), opts);
  }

  async memberUpdate(memberId: string, peerUrls: readonly string[], opts?: CallOptions): Promise<void> {
    await this.unary(`${CLUSTER}/MemberUpdate`, wire.encodeMemberUpdateRequest(wire.memberIdOf(memberId), peerUrls), opts);
  }

  /**
   * Maintenance.Snapshot, read as a pull-based iterator: messages queue until the reader takes them (HTTP/2
   * flow control bounds what etcd sends ahead).
   */
  async snapshot(opts: CallOptions = {}): Promise<SnapshotStream> {
    const queue: SnapshotChunk[] = [];
    let wake: (() => void) | undefined;
    // The message handler pauses the call it is passed to, which exists by the time a message arrives.
    let paused: GrpcCall | undefined;
    const call = await this.open(
      `${MAINTENANCE}/Snapshot`,
      (msg) => {
        queue.push(wire.decodeSnapshotResponse(msg));
        // Back-pressure: a reader slower than etcd (an upload) leaves etcd waiting, not our memory growing.
        if (queue.length >= SNAPSHOT_QUEUE_MESSAGES) paused?.pause();
        wake?.();
      },
      opts,
      wire.EMPTY_REQUEST,
    );
    paused = call;
    call.end();
    let ended = false;
    let failure: EtcdError | undefined;
    call.done.then(
      () => {
        ended = true;
        wake?.();
      },
      (err: EtcdError) => {
        ended = true;
        failure = err;
        wake?.();
      },
    );
    let cancelled = false;
    const cancel = () => {
      cancelled = true;
      call.cancel();
    };
    return {
      cancel,
      [Symbol.asyncIterator]: () => ({
        next: async (): Promise<IteratorResult<SnapshotChunk>> => {
          for (;;) {
            const chunk = queue.shift();
            if (queue.length < SNAPSHOT_QUEUE_MESSAGES / 2) call.resume();
            if (chunk) return { done: false, value: chunk };
            if (failure && !(cancelled && failure.code === 'E_ETCD_CANCELLED')) throw failure;
            if (ended) return { done: true, value: undefined };
            await new Promise<void>((r) => (wake = r));
            wake = undefined;
          }
        },
        return: async (): Promise<IteratorResult<SnapshotChunk>> => {
          cancel();
          return { done: true, value: undefined };
        },
      }),
    };
  }

  /**
   * Watch of every key from `startRevision` on, over the bidirectional Watch stream. A broken stream is
   * opened again from the revision after the last one delivered, so an etcd restart neither loses nor
   * repeats events; a compacted start revision rejects, a later compaction or refusal reaches onError.
   */
  async watchAllKeys(startRevision: number, handlers: WatchHandlers, opts: { cancelTimeoutMs?: number } = {}): Promise<AllKeysWatch> {
    const cancelTimeoutMs = opts.cancelTimeoutMs ?? WATCH_CANCEL_TIMEOUT_MS;
    let nextRevision = startRevision;
    let closed = false;
    let failed = false;
    let call: GrpcCall | undefined;
    let watchId: number | undefined;
    let onCanceled: (() => void) | undefined;
    let retryTimer: NodeJS.Timeout | undefined;

    const fail = (err: EtcdError) => {
      if (failed || closed) return;
      failed = true;
      call?.cancel(err);
      handlers.onError(err);
    };
    const compactedError = (revision: number, compactRevision: number) =>
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
      const onMessage = (msg: Buffer) => {
        const res = wire.decodeWatchResponse(msg);
        if (res.created) {
          watchId = res.watchId;
          if (res.hasHeader) handlers.onHeader?.(res.header.revision, res.header.clusterId.toString());
          if (!res.canceled) {
            established = true;
            created();
          }
        }
        if (res.canceled) {
          onCanceled?.();
          if (closed || failed) return;
          const err =
            res.compactRevision > 0
              ? compactedError(from, res.compactRevision)
              : new EtcdError('E_ETCD_REQUEST', `watch from revision ${from} cancelled by etcd: ${res.cancelReason || 'no reason given'}`);
          // Before the creation is confirmed the caller gets the refusal; after, onError does.
          if (established) fail(err);
          else refused(err);
          return;
        }
        if (closed || res.created) return;
        if (res.hasHeader) handlers.onHeader?.(res.header.revision, res.header.clusterId.toString());
        if (res.events.length === 0) return;
        const time = nowRfc3339Nano();
        const events: DeltaEvent[] = res.events.map((e) => ({
          type: e.type,
          key: e.kv.key,
          value: e.kv.value,
          createRevision: e.kv.createRevision,
          modRevision: e.kv.modRevision,
          version: e.kv.version,
          lease: e.kv.lease,
          time,
        }));
        nextRevision = events[events.length - 1]!.modRevision + 1;
        handlers.onEvents(events, res.header.revision);
      };
      const c = await this.open(WATCH, onMessage, {}, wire.encodeWatchCreateAllKeys(from));
      call = c;
      c.done.then(
        () => lost(c, new EtcdError('E_ETCD_UNAVAILABLE', 'the watch stream ended')),
        (err: EtcdError) => lost(c, err),
      );
      c.done.catch(refused);
      await confirmed;
    };
    /** A stream that ended on its own: connect again unless etcd refused the watch (auth, closed client). */
    const lost = (c: GrpcCall, err: EtcdError) => {
      if (closed || failed || call !== c) return;
      if (
        (err.code === 'E_ETCD_AUTH' && !TOKEN_REFUSED.test(err.message)) ||
        err.code === 'E_ETCD_CLOSED' ||
        err.code === 'E_ETCD_COMPACTED'
      ) {
        fail(new EtcdError(err.code, `watch from revision ${startRevision} failed: ${err.message}`));
        return;
      }
      if (TOKEN_REFUSED.test(err.message)) this.token = undefined;
      retryTimer = setTimeout(() => {
        if (closed || failed) return;
        establish().catch((e: unknown) => {
          if (isEtcdError(e) && (e.code === 'E_ETCD_UNAVAILABLE' || e.code === 'E_ETCD_TIMEOUT')) lost(c, e);
          else fail(isEtcdError(e) ? e : new EtcdError('E_ETCD_REQUEST', String(e)));
        });
      }, WATCH_RETRY_MS);
    };

    await this.assertRevisionAvailable(startRevision);
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
        if (c && watchId !== undefined) c.write(wire.encodeWatchCancel(watchId));
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
   * etcd confirms a watch from a compacted revision before it cancels it; a read at the revision tells at
   * once, so the caller gets the refusal rather than onError.
   */
  private async assertRevisionAvailable(revision: number): Promise<void> {
    try {
      await this.unary(`${KV}/Range`, wire.encodeRangeRequest('foo', revision));
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

  close(): void {
    this.channel.close();
  }
}

/** H2EtcdClient of an etcd this process started: plain HTTP/2 on loopback, plus the replay's transaction path. */
export class LocalH2EtcdClient extends H2EtcdClient implements LocalEtcdClient {
  constructor(
    private readonly clientUrl: string,
    receiveWindow?: number,
  ) {
    super({ endpoints: [clientUrl], ...(receiveWindow ? { receiveWindow } : {}) });
  }

  openReplayTxns(logger: Logger, opts?: ReplayTxnsOptions): Promise<ReplayTxns> {
    return openReplayTxns(
      this.clientUrl,
      { currentRevision: (t) => this.currentRevision(t), txn: (ops, t) => this.txn(ops, t) },
      logger,
      opts,
    );
  }

  async leaseGrant(id: string, ttlSeconds: number, opts?: CallOptions): Promise<void> {
    const res = wire.decodeLeaseGrantResponse(await this.unary(`${LEASE}/LeaseGrant`, wire.encodeLeaseGrantRequest(id, ttlSeconds), opts));
    if (res.error !== '') throw new EtcdError('E_ETCD_REQUEST', `LeaseGrant of lease ${id}: ${res.error}`);
    if (res.id !== id) throw new EtcdError('E_ETCD_REQUEST', `LeaseGrant of lease ${id}: etcd granted lease ${res.id}`);
  }

  async leaseRevoke(id: string, opts?: CallOptions): Promise<void> {
    await this.unary(`${LEASE}/LeaseRevoke`, wire.encodeLeaseRevokeRequest(id), opts);
  }

  /** KV.Txn of `ops` (txn-wire.ts encodes it), with etcd's own message when it refuses. */
  async txn(ops: readonly ReplayOp[], timeoutMs: number): Promise<number> {
    const { revision } = wire.decodeHeaderOnly(await this.unary('/etcdserverpb.KV/Txn', encodeTxnRequest(ops), { timeoutMs }));
    if (revision <= 0) throw new EtcdError('E_ETCD_REQUEST', 'KV.Txn: etcd answered without a header revision');
    return revision;
  }
}
