/**
 * The etcd v3 API messages the project's EtcdClient sends and reads, as protobuf bytes, encoded and decoded by
 * hand (a generated codec with .proto parsing cost the sidecar megabytes while idle). Only the fields we use.
 * Field numbers are those of etcd's `api/etcdserverpb/rpc.proto` and `api/mvccpb/kv.proto`; each encoder or
 * decoder names its message. Decoders skip fields they do not know, as any protobuf reader must.
 */
import { ProtoReader, WIRE_BYTES, WIRE_VARINT } from '../encoding/protobuf.js';
import { varintSize, writeVarint } from '../encoding/protobuf-write.js';

/** Builds one message field by field; proto3 leaves zero, false and empty scalars out. */
export class ProtoBuilder {
  private readonly parts: Array<{ tag: number; value: number | bigint | Buffer }> = [];
  private size = 0;

  uint(field: number, n: number | bigint): this {
    if (n === 0 || n === 0n) return this;
    const tag = (field << 3) | WIRE_VARINT;
    this.parts.push({ tag, value: n });
    this.size += varintSize(tag) + varintSize(n);
    return this;
  }

  bool(field: number, b: boolean): this {
    return b ? this.uint(field, 1) : this;
  }

  bytes(field: number, value: Buffer | string, always = false): this {
    const buf = typeof value === 'string' ? Buffer.from(value) : value;
    if (buf.length === 0 && !always) return this;
    const tag = (field << 3) | WIRE_BYTES;
    this.parts.push({ tag, value: buf });
    this.size += varintSize(tag) + varintSize(buf.length) + buf.length;
    return this;
  }

  /** The message with gRPC's 5-byte prefix (not compressed, big-endian length) in front. */
  grpcFrame(): Buffer {
    const out = Buffer.allocUnsafe(5 + this.size);
    out[0] = 0;
    out.writeUInt32BE(this.size, 1);
    this.writeTo(out, 5);
    return out;
  }

  /** The bare message, to nest in another. */
  finish(): Buffer {
    const out = Buffer.allocUnsafe(this.size);
    this.writeTo(out, 0);
    return out;
  }

  private writeTo(out: Buffer, at: number): void {
    for (const { tag, value } of this.parts) {
      at = writeVarint(out, at, tag);
      if (Buffer.isBuffer(value)) {
        at = writeVarint(out, at, value.length);
        value.copy(out, at);
        at += value.length;
      } else {
        at = writeVarint(out, at, value);
      }
    }
  }
}

/** A hex member id as the uint64 etcd takes. */
export function memberIdOf(hex: string): bigint {
  return BigInt(`0x${hex}`);
}

const text = (r: ProtoReader): string => {
  const [s, e] = r.bytes();
  return Buffer.from(r.buf.buffer, r.buf.byteOffset + s, e - s).toString('utf8');
};
/** A copy: the response buffer is not kept alive by what we hand out. */
const bytesCopy = (r: ProtoReader): Buffer => {
  const [s, e] = r.bytes();
  return Buffer.from(r.buf.subarray(s, e));
};
/**
 * A view of the message: for watch events, which their one consumer (the snapshotter's delta buffer) copies
 * before the handler returns. Copying every key and value first cost an allocation and a copy per event at
 * thousands of events a second. The message buffer is never written again, so a view stays correct; one
 * kept longer only keeps its message's bytes alive.
 */
const bytesView = (r: ProtoReader): Buffer => {
  const [s, e] = r.bytes();
  return Buffer.from(r.buf.buffer, r.buf.byteOffset + s, e - s);
};
/** The key or value of a KeyValue without one: shared, as nothing writes into a zero-length buffer. */
const NO_BYTES = Buffer.alloc(0);
const sub = (r: ProtoReader): ProtoReader => {
  const [s, e] = r.bytes();
  return new ProtoReader(r.buf, s, e);
};

/** etcdserverpb.ResponseHeader: cluster_id = 1, member_id = 2, revision = 3, raft_term = 4. */
export interface ResponseHeader {
  clusterId: bigint;
  memberId: bigint;
  revision: number;
  raftTerm: number;
}

export function decodeHeader(r: ProtoReader): ResponseHeader {
  const h: ResponseHeader = { clusterId: 0n, memberId: 0n, revision: 0, raftTerm: 0 };
  while (r.next()) {
    if (r.field === 1) h.clusterId = r.uint64Big();
    else if (r.field === 2) h.memberId = r.uint64Big();
    else if (r.field === 3) h.revision = r.uint64();
    else if (r.field === 4) h.raftTerm = r.uint64();
    else r.skip();
  }
  return h;
}

const EMPTY_HEADER: ResponseHeader = { clusterId: 0n, memberId: 0n, revision: 0, raftTerm: 0 };

/** Any response whose header (field 1) is all we read. */
export function decodeHeaderOnly(msg: Buffer): ResponseHeader {
  const r = new ProtoReader(msg);
  let h = EMPTY_HEADER;
  while (r.next()) {
    if (r.field === 1) h = decodeHeader(sub(r));
    else r.skip();
  }
  return h;
}

/** RangeRequest{key = 1, revision = 4, serializable = 7}: one key. */
export function encodeRangeRequest(key: Buffer | string, revision = 0): Buffer {
  return new ProtoBuilder().bytes(1, key, true).uint(4, revision).grpcFrame();
}

/** mvccpb.KeyValue: key = 1, create_revision = 2, mod_revision = 3, version = 4, value = 5, lease = 6. */
export interface KeyValue {
  key: Buffer;
  createRevision: number;
  modRevision: number;
  version: number;
  value: Buffer;
  /** Decimal, as the delta format writes it. */
  lease: string;
}

/** A KeyValue whose key and value are copies, not kept alive by the response. */
export function decodeKeyValue(r: ProtoReader): KeyValue {
  return decodeKeyValueWith(r, bytesCopy);
}

function decodeKeyValueWith(r: ProtoReader, bytes: (r: ProtoReader) => Buffer): KeyValue {
  const kv: KeyValue = { key: NO_BYTES, createRevision: 0, modRevision: 0, version: 0, value: NO_BYTES, lease: '0' };
  while (r.next()) {
    if (r.field === 1) kv.key = bytes(r);
    else if (r.field === 2) kv.createRevision = r.uint64();
    else if (r.field === 3) kv.modRevision = r.uint64();
    else if (r.field === 4) kv.version = r.uint64();
    else if (r.field === 5) kv.value = bytes(r);
    else if (r.field === 6) kv.lease = BigInt.asIntN(64, r.uint64Big()).toString();
    else r.skip();
  }
  return kv;
}

/** RangeResponse: header = 1, kvs = 2. */
export function decodeRangeResponse(msg: Buffer): { header: ResponseHeader; kvs: KeyValue[] } {
  const r = new ProtoReader(msg);
  let header = EMPTY_HEADER;
  const kvs: KeyValue[] = [];
  while (r.next()) {
    if (r.field === 1) header = decodeHeader(sub(r));
    else if (r.field === 2) kvs.push(decodeKeyValue(sub(r)));
    else r.skip();
  }
  return { header, kvs };
}

/** PutRequest{key = 1, value = 2}. */
export function encodePutRequest(key: string, value: string | Buffer): Buffer {
  return new ProtoBuilder().bytes(1, key, true).bytes(2, value).grpcFrame();
}

/** CompactionRequest{revision = 1, physical = 2}. */
export function encodeCompactionRequest(revision: number, physical: boolean): Buffer {
  return new ProtoBuilder().uint(1, revision).bool(2, physical).grpcFrame();
}

/** HashKVRequest{revision = 1}: 0 asks for the member's current revision. */
export function encodeHashKvRequest(revision: number): Buffer {
  return new ProtoBuilder().uint(1, revision).grpcFrame();
}

/**
 * HashKVResponse: header = 1, hash = 2 (uint32), compact_revision = 3 (int64: -1 on a member that never
 * compacted, sent as a 10-byte varint), hash_revision = 4 (3.5.? and later; absent from 3.4's).
 */
export interface HashKvResponse {
  header: ResponseHeader;
  hash: number;
  compactRevision: number;
}

export function decodeHashKvResponse(msg: Buffer): HashKvResponse {
  const r = new ProtoReader(msg);
  const out: HashKvResponse = { header: EMPTY_HEADER, hash: 0, compactRevision: 0 };
  while (r.next()) {
    if (r.field === 1) out.header = decodeHeader(sub(r));
    else if (r.field === 2) out.hash = r.uint32() >>> 0;
    else if (r.field === 3) out.compactRevision = Number(BigInt.asIntN(64, r.uint64Big()));
    else r.skip();
  }
  return out;
}

/** A request message with no fields (StatusRequest, DefragmentRequest, SnapshotRequest). */
export const EMPTY_REQUEST: Buffer = new ProtoBuilder().grpcFrame();

/**
 * StatusResponse: header = 1, version = 2, dbSize = 3, leader = 4, raftIndex = 5, raftTerm = 6,
 * dbSizeInUse = 9, isLearner = 10.
 */
export interface StatusResponse {
  header: ResponseHeader;
  version: string;
  dbSize: number;
  leader: bigint;
  raftIndex: number;
  raftTerm: number;
  dbSizeInUse: number;
  isLearner: boolean;
}

export function decodeStatusResponse(msg: Buffer): StatusResponse {
  const r = new ProtoReader(msg);
  const s: StatusResponse = {
    header: EMPTY_HEADER,
    version: '',
    dbSize: 0,
    leader: 0n,
    raftIndex: 0,
    raftTerm: 0,
    dbSizeInUse: 0,
    isLearner: false,
  };
  while (r.next()) {
    if (r.field === 1) s.header = decodeHeader(sub(r));
    else if (r.field === 2) s.version = text(r);
    else if (r.field === 3) s.dbSize = r.uint64();
    else if (r.field === 4) s.leader = r.uint64Big();
    else if (r.field === 5) s.raftIndex = r.uint64();
    else if (r.field === 6) s.raftTerm = r.uint64();
    else if (r.field === 9) s.dbSizeInUse = r.uint64();
    else if (r.field === 10) s.isLearner = r.uint32() !== 0;
    else r.skip();
  }
  return s;
}

/** etcdserverpb.Member: ID = 1, name = 2, peerURLs = 3, clientURLs = 4, isLearner = 5. */
export interface Member {
  id: bigint;
  name: string;
  peerUrls: string[];
  clientUrls: string[];
  isLearner: boolean;
}

function decodeMember(r: ProtoReader): Member {
  const m: Member = { id: 0n, name: '', peerUrls: [], clientUrls: [], isLearner: false };
  while (r.next()) {
    if (r.field === 1) m.id = r.uint64Big();
    else if (r.field === 2) m.name = text(r);
    else if (r.field === 3) m.peerUrls.push(text(r));
    else if (r.field === 4) m.clientUrls.push(text(r));
    else if (r.field === 5) m.isLearner = r.uint32() !== 0;
    else r.skip();
  }
  return m;
}

/** MemberListRequest{linearizable = 1}. */
export function encodeMemberListRequest(linearizable: boolean): Buffer {
  return new ProtoBuilder().bool(1, linearizable).grpcFrame();
}

/** MemberListResponse{header = 1, members = 2}. */
export function decodeMemberListResponse(msg: Buffer): { header: ResponseHeader; members: Member[] } {
  const r = new ProtoReader(msg);
  let header = EMPTY_HEADER;
  const members: Member[] = [];
  while (r.next()) {
    if (r.field === 1) header = decodeHeader(sub(r));
    else if (r.field === 2) members.push(decodeMember(sub(r)));
    else r.skip();
  }
  return { header, members };
}

/** MemberAddRequest{peerURLs = 1, isLearner = 2}. */
export function encodeMemberAddRequest(peerUrls: readonly string[], learner: boolean): Buffer {
  const b = new ProtoBuilder();
  for (const u of peerUrls) b.bytes(1, u, true);
  return b.bool(2, learner).grpcFrame();
}

/** MemberAddResponse{header = 1, member = 2}. */
export function decodeMemberAddResponse(msg: Buffer): Member | undefined {
  const r = new ProtoReader(msg);
  let member: Member | undefined;
  while (r.next()) {
    if (r.field === 2) member = decodeMember(sub(r));
    else r.skip();
  }
  return member;
}

/** MemberRemoveRequest{ID = 1} and MemberPromoteRequest{ID = 1}. */
export function encodeMemberIdRequest(id: bigint): Buffer {
  return new ProtoBuilder().uint(1, id).grpcFrame();
}

/** MemberUpdateRequest{ID = 1, peerURLs = 2}. */
export function encodeMemberUpdateRequest(id: bigint, peerUrls: readonly string[]): Buffer {
  const b = new ProtoBuilder().uint(1, id);
  for (const u of peerUrls) b.bytes(2, u, true);
  return b.grpcFrame();
}

/** SnapshotResponse{header = 1, blob = 3}. */
export function decodeSnapshotResponse(msg: Buffer): { revision: number; blob: Buffer } {
  const r = new ProtoReader(msg);
  let revision = 0;
  let blob: Buffer = Buffer.alloc(0);
  while (r.next()) {
    if (r.field === 1) revision = decodeHeader(sub(r)).revision;
    else if (r.field === 3) {
      // The message buffer is this chunk's alone, so the blob is a view, not a copy.
      const [s, e] = r.bytes();
      blob = msg.subarray(s, e);
    } else r.skip();
  }
  return { revision, blob };
}

/** AuthenticateRequest{name = 1, password = 2}. */
export function encodeAuthenticateRequest(name: string, password: string): Buffer {
  return new ProtoBuilder().bytes(1, name).bytes(2, password).grpcFrame();
}

/** AuthenticateResponse{token = 2}. */
export function decodeAuthenticateResponse(msg: Buffer): string {
  const r = new ProtoReader(msg);
  let token = '';
  while (r.next()) {
    if (r.field === 2) token = text(r);
    else r.skip();
  }
  return token;
}

/**
 * WatchRequest{create_request = 1: WatchCreateRequest{key = 1, range_end = 2, start_revision = 3}} for
 * every key (`\0`..`\0`).
 */
export function encodeWatchCreateAllKeys(startRevision: number): Buffer {
  const create = new ProtoBuilder()
    .bytes(1, Buffer.from([0]))
    .bytes(2, Buffer.from([0]))
    .uint(3, startRevision)
    .finish();
  return new ProtoBuilder().bytes(1, create, true).grpcFrame();
}

/** WatchRequest{cancel_request = 2: WatchCancelRequest{watch_id = 1}}. */
export function encodeWatchCancel(watchId: number): Buffer {
  return new ProtoBuilder().bytes(2, new ProtoBuilder().uint(1, watchId).finish(), true).grpcFrame();
}

/** mvccpb.Event: type = 1 (PUT 0, DELETE 1), kv = 2. */
export interface WatchEvent {
  type: 'PUT' | 'DELETE';
  kv: KeyValue;
}

/**
 * WatchResponse: header = 1, watch_id = 2, created = 3, canceled = 4, compact_revision = 5,
 * cancel_reason = 6, events = 11.
 */
export interface WatchResponse {
  header: ResponseHeader;
  hasHeader: boolean;
  watchId: number;
  created: boolean;
  canceled: boolean;
  compactRevision: number;
  cancelReason: string;
  events: WatchEvent[];
}

export function decodeWatchResponse(msg: Buffer): WatchResponse {
  const r = new ProtoReader(msg);
  const w: WatchResponse = {
    header: EMPTY_HEADER,
    hasHeader: false,
    watchId: 0,
    created: false,
    canceled: false,
    compactRevision: 0,
    cancelReason: '',
    events: [],
  };
  while (r.next()) {
    if (r.field === 1) {
      w.header = decodeHeader(sub(r));
      w.hasHeader = true;
    } else if (r.field === 2) w.watchId = r.uint64();
    else if (r.field === 3) w.created = r.uint32() !== 0;
    else if (r.field === 4) w.canceled = r.uint32() !== 0;
    else if (r.field === 5) w.compactRevision = r.uint64();
    else if (r.field === 6) w.cancelReason = text(r);
    else if (r.field === 11) w.events.push(decodeEvent(sub(r)));
    else r.skip();
  }
  return w;
}

/** An event whose key and value are views of the message (see bytesView). */
function decodeEvent(r: ProtoReader): WatchEvent {
  let type: 'PUT' | 'DELETE' = 'PUT';
  let kv: KeyValue | undefined;
  while (r.next()) {
    if (r.field === 1) type = r.uint32() === 1 ? 'DELETE' : 'PUT';
    else if (r.field === 2) kv = decodeKeyValueWith(sub(r), bytesView);
    else r.skip();
  }
  return { type, kv: kv ?? decodeKeyValueWith(new ProtoReader(NO_BYTES), bytesView) };
}

/** A lease ID (decimal int64, as DeltaEvent.lease) as the varint etcd reads: its 64 bits, two's complement. */
export function leaseIdOf(decimal: string): bigint {
  return BigInt.asUintN(64, BigInt(decimal));
}

/** A varint read as int64 (etcd's lease IDs and TTLs), in decimal. */
const int64Text = (r: ProtoReader): string => BigInt.asIntN(64, r.uint64Big()).toString();

/** LeaseGrantRequest{TTL = 1, ID = 2}. */
export function encodeLeaseGrantRequest(id: string, ttlSeconds: number): Buffer {
  return new ProtoBuilder().uint(1, ttlSeconds).uint(2, leaseIdOf(id)).grpcFrame();
}

/** LeaseGrantResponse{header = 1, ID = 2, TTL = 3, error = 4}: the ID and TTL granted, or etcd's error text. */
export function decodeLeaseGrantResponse(msg: Buffer): { id: string; ttl: number; error: string } {
  const r = new ProtoReader(msg);
  const out = { id: '0', ttl: 0, error: '' };
  while (r.next()) {
    if (r.field === 2) out.id = int64Text(r);
    else if (r.field === 3) out.ttl = Number(int64Text(r));
    else if (r.field === 4) out.error = text(r);
    else r.skip();
  }
  return out;
}

/** LeaseRevokeRequest{ID = 1}. */
export function encodeLeaseRevokeRequest(id: string): Buffer {
  return new ProtoBuilder().uint(1, leaseIdOf(id)).grpcFrame();
}

/** LeaseTimeToLiveRequest{ID = 1, keys = 2}. */
export function encodeLeaseTimeToLiveRequest(id: string, keys: boolean): Buffer {
  return new ProtoBuilder().uint(1, leaseIdOf(id)).bool(2, keys).grpcFrame();
}

/**
 * LeaseTimeToLiveResponse{header = 1, ID = 2, TTL = 3, grantedTTL = 4, keys = 5}: TTL is -1 for a lease etcd
 * does not have (expired or revoked); `keys` counts the keys attached (asked for with `keys`).
 */
export function decodeLeaseTimeToLiveResponse(msg: Buffer): { ttl: number; grantedTtl: number; keys: number } {
  const r = new ProtoReader(msg);
  const out = { ttl: 0, grantedTtl: 0, keys: 0 };
  while (r.next()) {
    if (r.field === 3) out.ttl = Number(int64Text(r));
    else if (r.field === 4) out.grantedTtl = Number(int64Text(r));
    else if (r.field === 5) {
      r.skip();
      out.keys++;
    } else r.skip();
  }
  return out;
}
