/**
 * The project's one way to talk to etcd. `EtcdClient` lists exactly the calls the project makes, in its own
 * types (64-bit ids as hex strings, revisions and sizes as numbers, errors as EtcdError), so the rest of
 * the code does not depend on how the client speaks to etcd, and unit tests fake this
 * interface instead of a library. `GrpcEtcdClient` (calls.ts) implements it on the gRPC transport (grpc.ts).
 */
import type { AllKeysWatch, WatchHandlers } from './watch.js';

export type { AllKeysWatch, WatchHandlers } from './watch.js';

export interface CallOptions {
  /** The call fails with E_ETCD_TIMEOUT when etcd has not answered within this; no deadline when absent. */
  timeoutMs?: number | undefined;
}

export interface SignalOptions {
  /** Aborting it cancels the call at once (E_ETCD_CANCELLED); what etcd had accepted it may still finish. */
  signal?: AbortSignal | undefined;
}

/** One operation of a replayed revision: a put or a single-key delete. */
export interface ReplayOp {
  /** `lease`: the lease ID as a decimal int64 ('0' or absent: none). */
  request_put?: { key: Buffer; value: Buffer; lease?: string };
  request_delete_range?: { key: Buffer };
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

/** Maintenance.HashKV of the member that answered: its own backend, never forwarded. */
export interface EtcdKvHash {
  /** CRC-32C of the member's MVCC key bucket up to `revision` (etcd server/mvcc hash.go). */
  hash: number;
  /** The member's compaction revision the hash started from (-1: never compacted). */
  compactRevision: number;
  /** The member's current revision when it answered (the response header's). */
  headerRevision: number;
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

/** Lease.LeaseTimeToLive of one lease. */
export interface LeaseTimeToLive {
  /** Seconds left; -1 when etcd has no such lease (it expired or was revoked). */
  ttl: number;
  /** The TTL it was granted (0 when etcd has no such lease). */
  grantedTtl: number;
  /** Keys attached to it (counted only when asked for with `keys`). */
  keys: number;
}

export interface EtcdClient {
  /** Maintenance.Status of the member behind the client's (first reachable) endpoint. */
  status(opts?: CallOptions): Promise<EtcdStatus>;
  /**
   * Maintenance.Defragment. Aborting `signal` cancels the call at once (etcd finishes the defragmentation
   * anyway), so a pending one does not hold up a shutdown.
   */
  defragment(opts?: CallOptions & SignalOptions): Promise<void>;
  /**
   * Compacts the key space at `revision`; `physical` (default) waits until the backend has applied it.
   * Aborting `signal` cancels the call at once (etcd goes on with an accepted compaction).
   */
  compact(revision: number, opts?: CallOptions & SignalOptions & { physical?: boolean }): Promise<void>;
  /**
   * Maintenance.HashKV at `revision` (0: the member's current one) of the member behind the client's endpoint.
   * A revision below the member's compaction rejects with E_ETCD_COMPACTED. Aborting `signal` cancels the call.
   */
  hashKv(revision: number, opts?: CallOptions & SignalOptions): Promise<EtcdKvHash>;
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
  /** Lease.LeaseTimeToLive of the lease `id` (a decimal int64, as watch events name it). */
  leaseTimeToLive(id: string, opts?: CallOptions & { keys?: boolean }): Promise<LeaseTimeToLive>;
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
  /**
   * One unconditional KV.Txn of `ops`; resolves with the revision etcd gave it. etcd's refusal rejects with its
   * own message.
   */
  txn(ops: readonly ReplayOp[], opts?: CallOptions & SignalOptions): Promise<number>;
  /** Lease.LeaseGrant of the lease `id` (decimal int64) with `ttlSeconds`; rejects when etcd refuses it. */
  leaseGrant(id: string, ttlSeconds: number, opts?: CallOptions): Promise<void>;
  /** Lease.LeaseRevoke of the lease `id`: deletes the keys attached to it, if any. */
  leaseRevoke(id: string, opts?: CallOptions): Promise<void>;
  /**
   * A connection of the lean HTTP/2 client (lean-h2.ts) for the same transactions at a fraction of the CPU: the
   * online replay's. It does not decode gRPC statuses: a refusal rejects with LeanCallError, without etcd's words.
   */
  openLeanTxns(): Promise<LeanTxns>;
}

/** The online replay's transactions on the lean client; see LocalEtcdClient.openLeanTxns. */
export interface LeanTxns {
  /**
   * One unconditional KV.Txn of `ops`; resolves with the revision etcd gave it. Rejects with LeanCallError when
   * the call failed (refused, or the connection broke: applied or not), LeanDeadlineError when no answer came
   * within `timeoutMs` (applied or not), the signal's reason when it was aborted.
   */
  txn(ops: readonly ReplayOp[], opts?: CallOptions & SignalOptions): Promise<number>;
  close(): Promise<void>;
}
