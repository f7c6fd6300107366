/**
 * The newest chain of a store, fetched once into a scratch directory for the hash drill, which reads it
 * more than once (a pass per compaction revision and per bisection step): the full snapshot's database
 * (decompressed, its sha256 trailer checked on the way and cut off; a bbolt file needs random access) and the
 * deltas (decompressed and hash-checked by the restore's fetch, which also marks the events a delta shares
 * with the one before it). Disk use is what a restore of the chain takes before it writes anything; memory
 * stays bounded (everything streams). `dispose` removes the directory.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, readdir, rm, stat, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createDecompressStream, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { FullSnapshotVerifier, SHA256_SIZE } from '../backup/full-verify.js';
import { BoltDB } from '../bbolt/db.js';
import { Cursor } from '../bbolt/cursor.js';
import { storeRevisionOf } from '../backend/store-revision.js';
import { mkdirParents } from '../dirs.js';
import { EtcdbrError } from '../errors.js';
import { META_BUCKET, isFinishedCompactRevKey, isScheduledCompactRevKey, mainRevisionOf } from '../backend/schema.js';
import { fetchDeltasInOrder, type FetchedDelta } from '../restorer/fetch.js';
import type { Chain } from './chains.js';

/** The scratch directories' names: `hash-drill-<pid>-<random>`, so that a later process can tell who left one. */
const SCRATCH_PREFIX = 'hash-drill-';
const SCRATCH = /^hash-drill-(\d+)-[A-Za-z0-9]+$/;

/**
 * Removes the scratch directories in `tempDir` that a drill killed midway left (a drill removes its own):
 * those of processes that are gone, and, with `ownPid`, those named with this process's pid, which a process
 * calls before its first drill (in a container the sidecar is pid 1 again after a restart). Returns what it
 * removed; best effort.
 */
export async function removeLeftoverScratch(tempDir: string, ownPid: boolean): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(tempDir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    const m = SCRATCH.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid ? !ownPid : processExists(pid)) continue;
    await rm(join(tempDir, name), { recursive: true, force: true }).then(
      () => removed.push(name),
      () => undefined,
    );
  }
  return removed;
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export interface LocalChain {
  base: Snapshot;
  /** The base database (trailer cut off). */
  baseFile: string;
  /** The store revision of the base database (the last key's, or its finished compaction's). */
  baseRevision: number;
  /** The revision the base database was compacted at (its scheduled compaction; 0: never). */
  baseCompactRevision: number;
  deltas: FetchedDelta[];
  /** The newest revision the chain holds. */
  headRevision: number;
  /** Bytes written to the scratch directory. */
  bytes: number;
  dispose(): Promise<void>;
}

export interface FetchChainOptions {
  /** The parent of the scratch directory (the sidecar's --snapstore-temp-directory). */
  tempDir: string;
  maxFetchers: number;
  signal?: AbortSignal;
}

export async function fetchChain(store: SnapStore, chain: Chain, opts: FetchChainOptions): Promise<LocalChain> {
  await mkdirParents(opts.tempDir);
  const dir = await mkdtemp(join(opts.tempDir, `${SCRATCH_PREFIX}${process.pid}-`));
  const deltas: FetchedDelta[] = [];
  try {
    const baseFile = join(dir, 'base.db');
    await fetchDatabase(store, chain.base, baseFile, opts.signal);
    const db = await BoltDB.open(baseFile);
    let baseRevision: number;
    let baseCompactRevision: number;
    try {
      baseRevision = await storeRevisionOf(db);
      baseCompactRevision = await compactRevisionOf(db);
    } finally {
      await db.close();
    }
    let bytes = (await stat(baseFile)).size;
    const fetchOptions = { maxFetchers: opts.maxFetchers, tempDir: dir, ...(opts.signal ? { signal: opts.signal } : {}) };
    for await (const d of fetchDeltasInOrder(store, chain.deltas, fetchOptions)) {
      deltas.push(d);
      bytes += (await stat(d.file)).size;
    }
    const headRevision = Math.max(baseRevision, chain.deltas.at(-1)?.lastRevision ?? 0);
    return {
      base: chain.base,
      baseFile,
      baseRevision,
      baseCompactRevision,
      deltas,
      headRevision,
      bytes,
      dispose: () => rm(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

async function fetchDatabase(store: SnapStore, snap: Snapshot, file: string, signal: AbortSignal | undefined): Promise<void> {
  const raw = await store.fetch(snap, undefined, signal ? { signal } : {});
  await pipeline(
    raw,
    createDecompressStream(snap.compressionSuffix, snap.snapName),
    new FullSnapshotVerifier(`full snapshot ${snap.snapName}`),
    createWriteStream(file, { mode: 0o600, highWaterMark: 1 << 20 }),
    signal ? { signal } : {},
  );
  const size = (await stat(file)).size;
  if (size % 512 !== SHA256_SIZE)
    throw new EtcdbrError('E_CORRUPT', `full snapshot ${snap.snapName}: ${size} bytes is no database and trailer`);
  await truncate(file, size - SHA256_SIZE);
}

/** The revision the database was compacted at: its scheduled compaction (etcd finishes one on start), 0 if none. */
async function compactRevisionOf(db: BoltDB): Promise<number> {
  const meta = await db.bucket(META_BUCKET);
  if (!meta) return 0;
  let revision = 0;
  for await (const e of new Cursor(db, meta)) {
    if (isScheduledCompactRevKey(e.key, 0, e.key.length) || isFinishedCompactRevKey(e.key, 0, e.key.length)) {
      revision = Math.max(revision, mainRevisionOf(e.value) ?? 0);
    }
  }
  return revision;
}
