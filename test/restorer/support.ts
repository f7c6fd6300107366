/**
 * Helpers for the restorer's integration tests: dumps of a live etcd (optionally at a past revision,
 * optionally with credentials) and re-cutting delta chains.
 */
import { createHash } from 'node:crypto';
import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Etcd3, type IOptions } from 'etcd3';
import {
  newSnapshot,
  type CompressionPolicy,
  type CompressionSuffix,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS } from '../support/etcd.js';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';
import { saveDeltaSnapshot } from '../../src/snapshotter/delta-snapshot.js';

/** A kv as compared between source and restore: leases aside (restore drops them, as upstream). */
export interface Kv {
  key: string; // hex
  value: string; // sha256 of the value, so a 1 MiB value does not bloat a diff
  size: number;
  create_revision: number;
  mod_revision: number;
  version: number;
}

export interface Dump {
  revision: number;
  kvs: Kv[];
}

export function client(url: string, auth?: { username: string; password: string }): Etcd3 {
  const opts: IOptions = { hosts: url, grpcOptions: { 'grpc.max_receive_message_length': -1 } };
  if (auth) opts.auth = auth;
  return new Etcd3(opts);
}

/** Every key (at `revision` when given: etcd's point-in-time range) sorted by raw key bytes. */
export async function dump(c: Etcd3, revision?: number): Promise<Dump> {
  const q = c.getAll();
  if (revision !== undefined) q.revision(revision);
  const res = await q.exec();
  const kvs = res.kvs.map((kv) => ({
    key: kv.key.toString('hex'),
    value: createHash('sha256').update(kv.value).digest('hex'),
    size: kv.value.length,
    create_revision: Number(kv.create_revision),
    mod_revision: Number(kv.mod_revision),
    version: Number(kv.version),
  }));
  kvs.sort((a, b) => Buffer.compare(Buffer.from(a.key, 'hex'), Buffer.from(b.key, 'hex')));
  return { revision: revision ?? Number(res.header.revision), kvs };
}

/** Starts etcd on a restored data dir, dumps it, stops it. */
export async function dumpDataDir(binaries: EtcdBinaries, dataDir: string): Promise<Dump> {
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  const c = client(etcd.clientUrl);
  try {
    return await dump(c);
  } finally {
    c.close();
    await etcd.stop();
  }
}

/** Writes `events` as one delta named `Incr-<start>-<lastRevision ?? last event>`. */
export async function writeDelta(
  store: SnapStore,
  events: readonly DeltaEvent[],
  start: number,
  createdOn: Date,
  compression: CompressionPolicy | 'none' = 'gzip',
  lastRevision?: number,
): Promise<Snapshot> {
  const buf = new DeltaBuffer();
  for (const e of events) buf.append(e);
  const payload = buf.take();
  if (!payload) throw new Error('writeDelta: no events');
  if (lastRevision !== undefined) payload.lastRevision = lastRevision;
  return saveDeltaSnapshot(store, payload, start, compression === 'none' ? undefined : compression, createdOn);
}

/** Copies a full snapshot object under another name revision (to construct overlaps). */
export async function copyFullAs(from: SnapStore, snap: Snapshot, to: SnapStore, lastRevision: number): Promise<Snapshot> {
  const copy = newSnapshot({
    kind: 'Full',
    startRevision: 0,
    lastRevision,
    createdOn: snap.createdOn,
    compressionSuffix: snap.compressionSuffix as CompressionSuffix,
  });
  await to.save(copy, await from.fetch(snap));
  return copy;
}

/** Path, size and sha256 of every file under `dir` (to show a dir was left untouched). */
export async function fingerprint(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (d: string, rel: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(p, r);
      else
        out[r] = `${(await stat(p)).size}:${createHash('sha256')
          .update(await readFile(p))
          .digest('hex')}`;
    }
  };
  await walk(dir, '');
  return out;
}

export async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}

/** A logger that keeps the messages, for asserting on what a run did. */
export function recordingLogger(): Logger & { messages: string[]; warnings: string[] } {
  const messages: string[] = [];
  const warnings: string[] = [];
  const msg = (obj: object | string, m?: string) => (typeof obj === 'string' ? obj : (m ?? ''));
  const rec = (obj: object | string, m?: string) => void messages.push(msg(obj, m));
  const warn = (obj: object | string, m?: string) => void warnings.push(msg(obj, m));
  return { messages, warnings, debug: rec, info: rec, warn, error: warn };
}
