/**
 * Raft snapshot files `member/snap/%016x-%016x.snap` (term, index): a snappb.Snapshot {crc, data} whose data
 * is a raftpb.Snapshot and whose crc is crc32c(data). Like etcd's `Snapshotter.Load`, the newest file that
 * reads back intact wins (names sort by term, then index); broken ones are skipped and reported, never
 * renamed (etcd renames them to `.broken` itself when it starts). No snapshot at all is a normal state.
 */
import { EtcdbrError } from '../errors.js';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32c } from '../encoding/crc32c.js';
import { ProtoError } from '../encoding/protobuf.js';
import { decodeRaftSnapshotMetadata, decodeSnapEnvelope } from './records.js';
import type { SnapshotRef } from './records.js';

export interface LoadedSnapshot extends SnapshotRef {
  name: string;
}

export interface SnapLoadResult {
  /** The newest intact snapshot; undefined when there is none (etcd's ErrNoSnapshot). */
  snapshot?: LoadedSnapshot;
  /** Newer files that were skipped because they do not read back, newest first. */
  broken: { name: string; reason: string }[];
}

/** Reads one .snap file; throws an Error saying what is wrong with it. */
export async function readSnapFile(path: string): Promise<SnapshotRef> {
  const b = await readFile(path);
  if (b.length === 0) throw new EtcdbrError('E_CORRUPT', 'empty snapshot file');
  let env;
  try {
    env = decodeSnapEnvelope(b);
  } catch (err) {
    if (err instanceof ProtoError) throw new EtcdbrError('E_CORRUPT', `undecodable snapshot envelope: ${err.message}`);
    throw err;
  }
  if (env.dataEnd === env.dataStart || env.crc === 0) throw new EtcdbrError('E_CORRUPT', 'snapshot without data or crc');
  const crc = crc32c(b, 0, env.dataStart, env.dataEnd);
  if (crc !== env.crc) throw new EtcdbrError('E_CORRUPT', `crc mismatch: file says ${env.crc >>> 0}, data gives ${crc}`);
  try {
    return decodeRaftSnapshotMetadata(b, env.dataStart, env.dataEnd);
  } catch (err) {
    if (err instanceof ProtoError) throw new EtcdbrError('E_CORRUPT', `undecodable raft snapshot: ${err.message}`);
    throw err;
  }
}

/** The newest intact snapshot of `snapDir`. Throws only if the directory cannot be listed. */
export async function loadNewestSnapshot(snapDir: string): Promise<SnapLoadResult> {
  const names = (await readdir(snapDir))
    .filter((n) => n.endsWith('.snap'))
    .sort()
    .reverse();
  const broken: SnapLoadResult['broken'] = [];
  for (const name of names) {
    try {
      const ref = await readSnapFile(join(snapDir, name));
      return { snapshot: { name, ...ref }, broken };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // A directory or an unreadable file named *.snap is as broken as a bad checksum, for etcd too.
      broken.push({ name, reason: code ? `${code}: ${(err as Error).message}` : (err as Error).message });
    }
  }
  return { broken };
}
