/**
 * EtcdClient (types.ts) on the one gRPC transport (grpc.ts), with the messages generated from etcd's .proto files
 * (gen/): each method builds its request, makes the call and turns the response into the project's own types
 * (64-bit ids as hex strings, revisions and sizes as numbers). The watch and the snapshot stream have modules of
 * their own (watch-stream.ts, snapshot-stream.ts).
 */
import { AuthenticatedCalls, type Credentials } from './authenticated.js';
import { EtcdError } from './errors.js';
import type { Member } from './gen/etcd/api/etcdserverpb/rpc_pb.js';
import { GrpcTransport, type Transport, type TransportOptions } from './grpc.js';
import { Cluster, KV, Lease, Maintenance } from './methods.js';
import { headerRevision, leaseIdOf, txnRequestOf } from './replay-codec.js';
import { openSnapshotStream } from './snapshot-stream.js';
import type {
  CallOptions,
  EtcdClient,
  EtcdKvHash,
  EtcdMember,
  EtcdMemberList,
  EtcdStatus,
  LeanTxns,
  LeaseTimeToLive,
  LocalEtcdClient,
  ReplayOp,
  SignalOptions,
  SnapshotStream,
} from './types.js';
import { watchAllKeys, type AllKeysWatch, type WatchHandlers } from './watch-stream.js';

export type { Credentials } from './authenticated.js';

/** A decoded message has every field (absent on the wire: its default); its types say optional, as a request's. */
const hex = (id: bigint | undefined): string => (id ?? 0n).toString(16);
const num = (n: bigint | undefined): number => Number(n ?? 0n);

/** A hex member id as the uint64 etcd takes. */
function memberIdOf(id: string): bigint {
  if (!/^[0-9a-f]{1,16}$/i.test(id)) throw new EtcdError('E_ETCD_REQUEST', `not a member id: ${JSON.stringify(id)}`);
  return BigInt(`0x${id}`);
}

function toMember(m: Member): EtcdMember {
  return { id: hex(m.ID), name: m.name ?? '', peerUrls: m.peerURLs ?? [], clientUrls: m.clientURLs ?? [], isLearner: m.isLearner ?? false };
}

export class GrpcEtcdClient implements EtcdClient {
  protected readonly calls: AuthenticatedCalls;

  /** On a transport, or on a GrpcTransport made from its options. */
  constructor(transport: Transport | TransportOptions, credentials?: Credentials) {
    this.calls = new AuthenticatedCalls('unary' in transport ? transport : new GrpcTransport(transport), credentials);
  }

  async status(opts?: CallOptions): Promise<EtcdStatus> {
    const s = await this.calls.unary(Maintenance.status, {}, opts);
    return {
      memberId: hex(s.header?.memberId),
      clusterId: hex(s.header?.clusterId),
      revision: num(s.header?.revision),
      leaderId: hex(s.leader),
      raftTerm: num(s.raftTerm),
      raftIndex: num(s.raftIndex),
      isLearner: s.isLearner ?? false,
      dbSize: num(s.dbSize),
      dbSizeInUse: num(s.dbSizeInUse),
      version: s.version ?? '',
    };
  }

  async defragment(opts?: CallOptions & SignalOptions): Promise<void> {
    await this.calls.unary(Maintenance.defragment, {}, opts);
  }

  async compact(revision: number, opts: CallOptions & SignalOptions & { physical?: boolean } = {}): Promise<void> {
    await this.calls.unary(KV.compact, { revision: BigInt(revision), physical: opts.physical ?? true }, opts);
  }

  async hashKv(revision: number, opts?: CallOptions & SignalOptions): Promise<EtcdKvHash> {
    const res = await this.calls.unary(Maintenance.hashKV, { revision: BigInt(revision) }, opts);
    return { hash: res.hash ?? 0, compactRevision: num(res.compactRevision), headerRevision: num(res.header?.revision) };
  }

  /** A linearizable read of one key: its header carries the revision, and only a quorate cluster answers. */
  async currentRevision(timeoutMs: number): Promise<number> {
    const res = await this.calls.unary(KV.range, { key: Buffer.from('foo') }, { timeoutMs });
    return num(res.header?.revision);
  }

  async get(key: string, opts?: CallOptions): Promise<Buffer | undefined> {
    const res = await this.calls.unary(KV.range, { key: Buffer.from(key) }, opts);
    const value = res.kvs?.[0]?.value;
    // A copy: the response's buffer is not kept alive by what the caller keeps.
    return value === undefined ? undefined : Buffer.from(value);
  }

  async put(key: string, value: string | Buffer, opts?: CallOptions): Promise<void> {
    await this.calls.unary(KV.put, { key: Buffer.from(key), value: typeof value === 'string' ? Buffer.from(value) : value }, opts);
  }

  async leaseTimeToLive(id: string, opts: CallOptions & { keys?: boolean } = {}): Promise<LeaseTimeToLive> {
    const res = await this.calls.unary(Lease.leaseTimeToLive, { ID: leaseIdOf(id), keys: opts.keys ?? false }, opts);
    return { ttl: num(res.TTL), grantedTtl: num(res.grantedTTL), keys: res.keys?.length ?? 0 };
  }

  async memberList(opts: CallOptions & { linearizable?: boolean } = {}): Promise<EtcdMemberList> {
    const res = await this.calls.unary(Cluster.memberList, { linearizable: opts.linearizable ?? false }, opts);
    return { memberId: hex(res.header?.memberId), clusterId: hex(res.header?.clusterId), members: (res.members ?? []).map(toMember) };
  }

  async memberAdd(peerUrls: readonly string[], opts: CallOptions & { learner?: boolean } = {}): Promise<EtcdMember> {
    const res = await this.calls.unary(Cluster.memberAdd, { peerURLs: [...peerUrls], isLearner: opts.learner ?? false }, opts);
    if (!res.member) throw new EtcdError('E_ETCD_REQUEST', 'MemberAdd: etcd answered without the new member');
    return toMember(res.member);
  }

  async memberRemove(memberId: string, opts?: CallOptions): Promise<void> {
    await this.calls.unary(Cluster.memberRemove, { ID: memberIdOf(memberId) }, opts);
  }

  async memberPromote(memberId: string, opts?: CallOptions): Promise<void> {
    await this.calls.unary(Cluster.memberPromote, { ID: memberIdOf(memberId) }, opts);
  }

  async memberUpdate(memberId: string, peerUrls: readonly string[], opts?: CallOptions): Promise<void> {
    await this.calls.unary(Cluster.memberUpdate, { ID: memberIdOf(memberId), peerURLs: [...peerUrls] }, opts);
  }

  snapshot(opts: CallOptions = {}): Promise<SnapshotStream> {
    return openSnapshotStream(this.calls, opts);
  }

  watchAllKeys(startRevision: number, handlers: WatchHandlers, opts: { cancelTimeoutMs?: number } = {}): Promise<AllKeysWatch> {
    return watchAllKeys(this.calls, startRevision, handlers, opts);
  }

  close(): void {
    this.calls.transport.close();
  }
}

/** The client of an etcd this process started: plain HTTP/2 on loopback, and the restore's transactions. */
export class LocalGrpcEtcdClient extends GrpcEtcdClient implements LocalEtcdClient {
  constructor(
    private readonly clientUrl: string,
    transport: Transport | TransportOptions = { endpoints: [clientUrl] },
  ) {
    super(transport);
  }

  /** KV.Txn of `ops`, unconditional; resolves with the revision etcd gave it. */
  async leaseGrant(id: string, ttlSeconds: number, opts?: CallOptions): Promise<void> {
    const res = await this.calls.unary(Lease.leaseGrant, { ID: leaseIdOf(id), TTL: BigInt(ttlSeconds) }, opts);
    if (res.error) throw new EtcdError('E_ETCD_REQUEST', `LeaseGrant of lease ${id}: ${res.error}`);
    if ((res.ID ?? 0n).toString() !== id) throw new EtcdError('E_ETCD_REQUEST', `LeaseGrant of lease ${id}: etcd granted lease ${res.ID}`);
  }

  async leaseRevoke(id: string, opts?: CallOptions): Promise<void> {
    await this.calls.unary(Lease.leaseRevoke, { ID: leaseIdOf(id) }, opts);
  }

  async txn(ops: readonly ReplayOp[], opts: CallOptions & SignalOptions = {}): Promise<number> {
    const res = await this.calls.unary(KV.txn, txnRequestOf(ops), opts);
    return headerRevision(res.header?.revision);
  }

  /**
   * The lean client (lean-txns.ts, lean-h2.ts and its frame and HPACK modules) loads here, on first use: only the
   * online replay sends through it, and every sidecar that only watches and snapshots held its code besides.
   */
  async openLeanTxns(): Promise<LeanTxns> {
    const { openLeanTxns } = await import('./lean-txns.js');
    return openLeanTxns(this.clientUrl);
  }
}
