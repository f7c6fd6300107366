/**
 * WAL verification, the read-only counterpart of etcd's `wal.Verify` as used by upstream's full validation:
 * pick the segments from the one that covers the snapshot index on (consecutive sequence numbers), decode
 * every record with its CRC chain, require identical metadata records, find the snapshot record that matches
 * the newest .snap, and check raft invariants etcd would otherwise panic on at start: entry indexes without
 * gaps (a lower index overwrites the uncommitted tail, as raft allows) and a commit index within the log.
 *
 * A torn record at the end of the last segment is reported as `repairable`, not as corruption: it is etcd's
 * io.ErrUnexpectedEOF case, which etcd (and upstream's one `wal.Repair` attempt) fix by truncating the tail.
 * This module never writes; nothing is repaired here.
 */
import { basename, join } from 'node:path';
import { listWalNames } from './names.js';
import type { WalName } from './names.js';
import { scanWal } from './reader.js';
import type { WalScanOptions, WalScanProblem } from './reader.js';
import { RecordType, decodeEntry, decodeHardState, decodeMemberMetadata, decodeWalSnapshot } from './records.js';
import type { HardState, MemberMetadata, SnapshotRef } from './records.js';
import { ProtoError } from '../encoding/protobuf.js';

export interface WalVerifyResult {
  /** No corruption found (a repairable torn tail still counts as ok). */
  ok: boolean;
  /** Set when the last segment ends in a torn record; etcd truncates it on start. */
  repairable?: WalScanProblem;
  /** What is wrong, one line each; empty when ok. */
  problems: string[];
  /** Segments read, in order (names only). */
  files: string[];
  metadata?: MemberMetadata;
  hardState?: HardState;
  /** The snapshot record matching the requested (index, term) was found. */
  snapshotMatched: boolean;
  /** Index of the last entry after the snapshot (the snapshot index when there is none). */
  lastIndex: number;
  entries: number;
  records: number;
  /** Bytes of WAL frames verified. */
  bytes: number;
}

export interface WalVerifyOptions extends WalScanOptions {
  /** Stop collecting semantic problems after this many (framing problems always stop at once). Default 100. */
  maxProblems?: number;
}

/**
 * Verifies the WAL in `walDir` against the newest raft snapshot (index, term); without one ({0, 0}) the
 * first segment must be present, as for a member that never snapshotted. Throws only on I/O errors other
 * than a missing directory.
 */
export async function verifyWal(
  walDir: string,
  snapshot: SnapshotRef = { index: 0, term: 0 },
  opts: WalVerifyOptions = {},
): Promise<WalVerifyResult> {
  const maxProblems = opts.maxProblems ?? 100;
  const result: WalVerifyResult = {
    ok: false,
    problems: [],
    files: [],
    snapshotMatched: false,
    lastIndex: snapshot.index,
    entries: 0,
    records: 0,
    bytes: 0,
  };
  const problem = (message: string): void => {
    if (result.problems.length < maxProblems) result.problems.push(message);
  };

  let names: WalName[];
  try {
    names = await listWalNames(walDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    problem(`wal: directory ${walDir} does not exist`);
    return result;
  }
  const selected = selectSegments(names, snapshot.index);
  if (typeof selected === 'string') {
    problem(selected);
    return result;
  }
  result.files = selected.map((n) => n.name);

  let metadataBytes: Buffer | undefined;
  let lastIndex = snapshot.index;
  let snapshotMismatch = false;
  const outcome = await scanWal(
    selected.map((n) => join(walDir, n.name)),
    (rec, buf, file, offset) => {
      const where = `${basename(file)}@${offset}`;
      try {
        switch (rec.type) {
          case RecordType.Metadata: {
            const data = buf.subarray(rec.dataStart, rec.dataEnd);
            if (metadataBytes === undefined) {
              metadataBytes = Buffer.from(data);
              result.metadata = decodeMemberMetadata(metadataBytes);
            } else if (!metadataBytes.equals(data)) {
              problem(`${where}: conflicting metadata record (member or cluster id differs from the first segment)`);
            }
            break;
          }
          case RecordType.Entry: {
            const e = decodeEntry(buf, rec.dataStart, rec.dataEnd);
            result.entries++;
            // Entries up to the snapshot are covered by it; after it, each index may repeat or rewind
            // (a new leader overwrote an uncommitted tail) but never skip ahead.
            if (e.index > snapshot.index) {
              if (e.index > lastIndex + 1) {
                problem(`${where}: entry index ${e.index} leaves a gap after ${lastIndex}`);
              }
              lastIndex = e.index;
            }
            break;
          }
          case RecordType.State:
            result.hardState = decodeHardState(buf, rec.dataStart, rec.dataEnd);
            break;
          case RecordType.Snapshot: {
            const s = decodeWalSnapshot(buf, rec.dataStart, rec.dataEnd);
            if (s.index === snapshot.index) {
              if (s.term !== snapshot.term) {
                snapshotMismatch = true;
                problem(`${where}: snapshot record (index ${s.index}, term ${s.term}) mismatches .snap term ${snapshot.term}`);
              } else {
                result.snapshotMatched = true;
              }
            }
            break;
          }
          default:
            problem(`${where}: unexpected record type ${rec.type}`);
        }
      } catch (err) {
        if (!(err instanceof ProtoError)) throw err;
        problem(`${where}: record of type ${rec.type} does not decode: ${err.message}`);
      }
    },
    opts,
  );

  result.records = outcome.records;
  result.bytes = outcome.bytes;
  result.lastIndex = lastIndex;
  if (outcome.end === 'corrupt' && outcome.problem) {
    problem(`${basename(outcome.problem.file)}@${outcome.problem.offset}: ${outcome.problem.message}`);
  } else if (outcome.end === 'torn' && outcome.problem) {
    result.repairable = { ...outcome.problem, file: basename(outcome.problem.file) };
  }
  if (outcome.end !== 'corrupt') {
    if (!result.snapshotMatched && !snapshotMismatch) {
      problem(`wal: snapshot record (index ${snapshot.index}, term ${snapshot.term}) not found`);
    }
    const hs = result.hardState;
    // raft refuses to start when the persisted commit index lies beyond the log it can read.
    if (hs && hs.commit > Math.max(lastIndex, snapshot.index)) {
      problem(`wal: hard state commit ${hs.commit} is beyond the last entry ${lastIndex}`);
    }
  }
  result.ok = result.problems.length === 0;
  return result;
}

/**
 * The segments etcd would read for `index`: from the last segment whose first index is ≤ `index` to the end,
 * with consecutive sequence numbers. Returns a problem text when there is none (etcd's ErrFileNotFound).
 */
export function selectSegments(names: readonly WalName[], index: number): WalName[] | string {
  if (names.length === 0) return 'wal: no segment files';
  const unusable = names.map(outOfRangeInName).find((p) => p !== undefined);
  if (unusable) return unusable;
  let from = -1;
  for (let i = names.length - 1; i >= 0; i--) {
    if (index >= names[i]!.index) {
      from = i;
      break;
    }
  }
  if (from < 0) return `wal: no segment covers snapshot index ${index} (oldest starts at ${names[0]!.index})`;
  const picked = names.slice(from);
  for (let i = 1; i < picked.length; i++) {
    if (picked[i]!.seq !== picked[i - 1]!.seq + 1) {
      return `wal: segment sequence broken between ${picked[i - 1]!.name} and ${picked[i]!.name}`;
    }
  }
  return picked;
}

/**
 * Why a segment's name is unusable: its sequence or index is 2^53 or more (a number would round it; no real
 * WAL gets there), said with the exact value. Undefined for a usable name.
 */
function outOfRangeInName(n: WalName): string | undefined {
  const [seq, index] = n.name.slice(0, -'.wal'.length).split('-') as [string, string];
  for (const [what, hex, value] of [
    ['sequence', seq, n.seq],
    ['index', index, n.index],
  ] as const) {
    if (!Number.isSafeInteger(value)) return `wal: segment ${n.name}: ${what} ${BigInt(`0x${hex}`)} is out of range (2^53 or more)`;
  }
  return undefined;
}

/**
 * The member and cluster id from the WAL's metadata record (every segment starts with one), for the
 * multi-node bootstrap decision. Reads only the head of the newest readable segment; undefined when the
 * directory holds no segment with a metadata record.
 */
export async function readWalMetadata(walDir: string): Promise<MemberMetadata | undefined> {
  let names: WalName[];
  try {
    names = await listWalNames(walDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  for (let i = names.length - 1; i >= 0; i--) {
    let found: MemberMetadata | undefined;
    await scanWal(
      [join(walDir, names[i]!.name)],
      (rec, buf) => {
        if (rec.type !== RecordType.Metadata) return true;
        try {
          found = decodeMemberMetadata(buf, rec.dataStart, rec.dataEnd);
        } catch {
          /* try an older segment */
        }
        return false;
      },
      { readBytes: 64 * 1024 },
    );
    if (found) return found;
  }
  return undefined;
}
