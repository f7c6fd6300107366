/**
 * The protobuf messages found in etcd's member/wal and member/snap files, decoded by hand.
 * Field numbers: walpb.Record {type=1 int64, crc=2 uint32, data=3 bytes}; walpb.Snapshot {index=1, term=2,
 * conf_state=3}; raftpb.Entry {Type=1, Term=2, Index=3, Data=4}; raftpb.HardState {term=1, vote=2, commit=3};
 * raftpb.Snapshot {data=1, metadata=2}; raftpb.SnapshotMetadata {conf_state=1, index=2, term=3};
 * snappb.Snapshot {crc=1 uint32, data=2}; etcdserverpb.Metadata {NodeID=1, ClusterID=2}.
 */
import { ProtoReader } from '../encoding/protobuf.js';

/** walpb record types (etcd `wal.go`, iota + 1). */
export const RecordType = {
  Metadata: 1,
  Entry: 2,
  State: 3,
  Crc: 4,
  Snapshot: 5,
} as const;

export interface WalRecord {
  type: number;
  crc: number;
  /** [dataStart, dataEnd) in the buffer the record was decoded from. */
  dataStart: number;
  dataEnd: number;
}

export function decodeRecord(buf: Uint8Array, start: number, end: number): WalRecord {
  const r = new ProtoReader(buf, start, end);
  // Go leaves absent fields at their zero value; an absent data field is an empty slice.
  const rec: WalRecord = { type: 0, crc: 0, dataStart: end, dataEnd: end };
  while (r.next()) {
    switch (r.field) {
      case 1:
        rec.type = r.uint64('record type');
        break;
      case 2:
        rec.crc = r.uint32();
        break;
      case 3:
        [rec.dataStart, rec.dataEnd] = r.bytes();
        break;
      default:
        r.skip();
    }
  }
  return rec;
}

export interface EntryHeader {
  /** raftpb.EntryType: 0 normal, 1 conf change, 2 conf change v2. */
  type: number;
  term: number;
  index: number;
}

/** raftpb.Entry without its payload (validation never needs the payload). */
export function decodeEntry(buf: Uint8Array, start = 0, end = buf.length): EntryHeader {
  const r = new ProtoReader(buf, start, end);
  const e: EntryHeader = { type: 0, term: 0, index: 0 };
  while (r.next()) {
    switch (r.field) {
      case 1:
        e.type = r.uint32();
        break;
      case 2:
        e.term = r.uint64('entry term');
        break;
      case 3:
        e.index = r.uint64('entry index');
        break;
      default:
        r.skip();
    }
  }
  return e;
}

export interface HardState {
  term: number;
  /** The member id voted for (0 = none), a full 64-bit id. */
  vote: bigint;
  commit: number;
}

export function decodeHardState(buf: Uint8Array, start = 0, end = buf.length): HardState {
  const r = new ProtoReader(buf, start, end);
  const s: HardState = { term: 0, vote: 0n, commit: 0 };
  while (r.next()) {
    switch (r.field) {
      case 1:
        s.term = r.uint64('hard state term');
        break;
      case 2:
        s.vote = r.uint64Big();
        break;
      case 3:
        s.commit = r.uint64('hard state commit');
        break;
      default:
        r.skip();
    }
  }
  return s;
}

/** The (index, term) of a snapshot; used for both walpb.Snapshot and raftpb.SnapshotMetadata. */
export interface SnapshotRef {
  index: number;
  term: number;
}

/** walpb.Snapshot: index=1, term=2. */
export function decodeWalSnapshot(buf: Uint8Array, start = 0, end = buf.length): SnapshotRef {
  const r = new ProtoReader(buf, start, end);
  const s: SnapshotRef = { index: 0, term: 0 };
  while (r.next()) {
    switch (r.field) {
      case 1:
        s.index = r.uint64('snapshot index');
        break;
      case 2:
        s.term = r.uint64('snapshot term');
        break;
      default:
        r.skip();
    }
  }
  return s;
}

/** raftpb.Snapshot → its metadata's (index, term); the payload (v2 store JSON) is skipped. */
export function decodeRaftSnapshotMetadata(buf: Uint8Array, start = 0, end = buf.length): SnapshotRef {
  const r = new ProtoReader(buf, start, end);
  const s: SnapshotRef = { index: 0, term: 0 };
  while (r.next()) {
    if (r.field !== 2) {
      r.skip();
      continue;
    }
    const [ms, me] = r.bytes();
    const m = new ProtoReader(buf, ms, me);
    while (m.next()) {
      switch (m.field) {
        case 2:
          s.index = m.uint64('snapshot index');
          break;
        case 3:
          s.term = m.uint64('snapshot term');
          break;
        default:
          m.skip();
      }
    }
  }
  return s;
}

/** snappb.Snapshot: the envelope of a .snap file. */
export interface SnapEnvelope {
  crc: number;
  dataStart: number;
  dataEnd: number;
}

export function decodeSnapEnvelope(buf: Uint8Array): SnapEnvelope {
  const r = new ProtoReader(buf);
  const s: SnapEnvelope = { crc: 0, dataStart: 0, dataEnd: 0 };
  while (r.next()) {
    switch (r.field) {
      case 1:
        s.crc = r.uint32();
        break;
      case 2:
        [s.dataStart, s.dataEnd] = r.bytes();
        break;
      default:
        r.skip();
    }
  }
  return s;
}

/** etcdserverpb.Metadata, the data of every WAL metadata record: who this member is, in which cluster. */
export interface MemberMetadata {
  nodeId: bigint;
  clusterId: bigint;
  /** Lower-case hex without padding, as etcd prints member and cluster ids. */
  nodeIdHex: string;
  clusterIdHex: string;
}

export function decodeMemberMetadata(buf: Uint8Array, start = 0, end = buf.length): MemberMetadata {
  const r = new ProtoReader(buf, start, end);
  let nodeId = 0n;
  let clusterId = 0n;
  while (r.next()) {
    switch (r.field) {
      case 1:
        nodeId = r.uint64Big();
        break;
      case 2:
        clusterId = r.uint64Big();
        break;
      default:
        r.skip();
    }
  }
  return { nodeId, clusterId, nodeIdHex: nodeId.toString(16), clusterIdHex: clusterId.toString(16) };
}
