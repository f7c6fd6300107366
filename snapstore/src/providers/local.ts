/**
 * Local provider: snapshots are files under `rootDir` at their object key (upstream `pkg/snapstore/local_snapstore.go`).
 * A save streams into a hidden temp file next to the target, fsyncs it, renames it into place and
 * fsyncs the directory, so a crash leaves either the old object or the new one, never half a file.
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants, createReadStream, createWriteStream } from 'node:fs';
import type { WriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rmdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { LocalStoreConfig } from '../config.js';
import { SnapStoreError } from '../errors.js';
import { InternalError } from '../internal-errors.js';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import { listedObjectKey, listingPrefix, objectKey, tryParseSnapshotKey } from '../snapshot.js';
import { sortSnapshots } from '../snapshot-order.js';
import type { Snapshot } from '../snapshot.js';
import type { ByteRange, FetchOptions, ListOptions, OpenOptions, SaveOptions, SnapStore } from '../store.js';
import { abortReason, describeError, saveFailed } from './common.js';

/** Temp files of unfinished saves; listing skips them (upstream's temp prefix, hidden). */
export const LOCAL_TEMP_PREFIX = '.etcd-backup-';

/**
 * A temp file untouched this long belongs to a save that died (kill -9, crash, power loss): a live save
 * writes continuously, so its modification time is always recent.
 */
export const STALE_TEMP_AGE_MS = 60 * 60 * 1000;

/**
 * Temp file names: `.etcd-backup-<12 random hex>`, followed by `.<16 hex of the owner's sha256>` when the
 * store was opened with `tempOwner`. A hash keeps the name short and free of any character the owner's
 * name might hold.
 */
function ownerTag(owner: string): string {
  return createHash('sha256').update(owner).digest('hex').slice(0, 16);
}

function tempFileName(tag: string | undefined): string {
  const name = `${LOCAL_TEMP_PREFIX}${randomBytes(6).toString('hex')}`;
  return tag === undefined ? name : `${name}.${tag}`;
}

/**
 * Temp files this process is writing now. The owner's sweep skips them: a store opened again in the same
 * process (new credentials, a second store on the same folder) must not remove a save under way.
 */
const writing = new Set<string>();

const DIR_MODE = 0o700;
const FILE_MODE = 0o600;

export async function openLocalStore(config: LocalStoreConfig, options: OpenOptions = {}): Promise<SnapStore> {
  if (!path.isAbsolute(config.rootDir)) {
    throw new SnapStoreError('E_CONFIG', `local store root ${JSON.stringify(config.rootDir)} must be an absolute path`);
  }
  const tag = options.tempOwner === undefined ? undefined : ownerTag(options.tempOwner);
  const store = new LocalSnapStore(config, tag);
  if (options.readOnly) {
    // Reading never creates or removes anything: a mistyped path is an error, not an empty store.
    await requireDirectory(config.rootDir, config.flagPrefix ?? '');
    return store;
  }
  // Upstream creates the prefix directory when the store is constructed.
  try {
    await mkdir(store.resolve(config.prefix), { recursive: true, mode: DIR_MODE });
  } catch (err) {
    throw new SnapStoreError('E_CONFIG', `cannot create local store directory ${store.resolve(config.prefix)}: ${describeError(err)}`, {
      cause: err,
    });
  }
  // v1 snapshots (a folder per full snapshot) are saved beside v2, in the sibling `v1` folder.
  const prefixDir = store.resolve(config.prefix);
  const sweep = { olderThanMs: Date.now() - STALE_TEMP_AGE_MS, ...(tag !== undefined ? { ownerTag: tag } : {}) };
  await sweepStaleTempFiles(prefixDir, sweep, store.log);
  if (path.basename(prefixDir) === 'v2') await sweepStaleTempFiles(path.join(path.dirname(prefixDir), 'v1'), sweep, store.log);
  return store;
}

async function requireDirectory(dir: string, flagPrefix: string): Promise<void> {
  let isDir: boolean;
  try {
    isDir = (await stat(dir)).isDirectory();
  } catch (err) {
    if (isCode(err, 'ENOENT')) {
      throw new SnapStoreError(
        'E_NOT_FOUND',
        `local store directory ${dir} does not exist: check --${flagPrefix}store-container (and $HOME for a relative one)`,
        { cause: err },
      );
    }
    throw new SnapStoreError('E_CONFIG', `cannot read local store directory ${dir}: ${describeError(err)}`, { cause: err });
  }
  if (!isDir) throw new SnapStoreError('E_CONFIG', `local store path ${dir} is not a directory: check --${flagPrefix}store-container`);
}

/**
 * Removes temp files of saves that died, below `dir` (v2 is flat; v1 has a folder per full snapshot):
 * those untouched since `olderThanMs`, and those named with `ownerTag` (the opening writer's own, left by
 * its previous process) of any age. They are never listed, so nothing else would ever reclaim their space.
 * Best effort: a failure is logged, never fatal.
 */
export async function sweepStaleTempFiles(
  dir: string,
  rule: { olderThanMs: number; ownerTag?: string },
  logger: Logger,
): Promise<string[]> {
  const ownSuffix = rule.ownerTag === undefined ? undefined : `.${rule.ownerTag}`;
  const removed: string[] = [];
  const walk = async (d: string, depth: number): Promise<void> => {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch (err) {
      if (!isCode(err, 'ENOENT')) logger.warn({ err, dir: d }, 'cannot read local store directory to remove stale temp files');
      return;
    }
    for (const e of entries) {
      const p = path.join(d, e.name);
      if (e.isDirectory() && depth < 2) await walk(p, depth + 1);
      else if (e.isFile() && e.name.startsWith(LOCAL_TEMP_PREFIX)) {
        try {
          const own = ownSuffix !== undefined && e.name.endsWith(ownSuffix) && !writing.has(p);
          if (!own && (await stat(p)).mtimeMs >= rule.olderThanMs) continue;
          await unlink(p);
          removed.push(p);
        } catch (err) {
          if (!isCode(err, 'ENOENT')) logger.warn({ err, file: p }, 'cannot remove stale temp file of an interrupted save');
        }
      }
    }
  };
  await walk(dir, 0);
  if (removed.length > 0) logger.info({ files: removed }, 'removed temp files of interrupted saves');
  return removed;
}

class LocalSnapStore implements SnapStore {
  readonly provider = 'Local' as const;
  readonly prefix: string;
  private readonly root: string;
  /** Begins the flags named in messages (StoreConfigBase.flagPrefix). */
  private readonly flagPrefix: string;
  private readonly logger: Logger;
  /** Ends the names of this store's temp files (see `tempFileName`). */
  private readonly tempTag: string | undefined;
  private closed = false;

  get log(): Logger {
    return this.logger;
  }

  constructor(config: LocalStoreConfig, tempTag: string | undefined) {
    this.tempTag = tempTag;
    this.prefix = config.prefix;
    this.root = path.resolve(config.rootDir);
    this.flagPrefix = config.flagPrefix ?? '';
    this.logger = config.logger ?? silentLogger;
  }

  /** Absolute path of an object key; refuses keys that would escape the root. */
  resolve(key: string): string {
    const p = path.resolve(this.root, ...key.split('/').filter((s) => s !== ''));
    if (p !== this.root && !p.startsWith(this.root + path.sep)) {
      throw new SnapStoreError(
        'E_BAD_NAME',
        `object key ${JSON.stringify(key)} escapes the local store root ${this.root}: --${this.flagPrefix}store-prefix must name a folder inside --${this.flagPrefix}store-container`,
      );
    }
    return p;
  }

  async list(_options?: ListOptions): Promise<Snapshot[]> {
    this.assertOpen();
    const base = stripSlashes(listingPrefix(this.prefix));
    const snaps: Snapshot[] = [];
    const walk = async (dirKey: string): Promise<void> => {
      let entries;
      try {
        entries = await readdir(this.resolve(dirKey), { withFileTypes: true });
      } catch (err) {
        // A missing directory is an empty store (the prefix may have been removed by hand).
        if (isCode(err, 'ENOENT') || isCode(err, 'ENOTDIR')) return;
        throw new SnapStoreError('E_UNREACHABLE', `cannot list local store directory ${this.resolve(dirKey)}: ${describeError(err)}`, {
          cause: err,
        });
      }
      for (const e of entries) {
        const key = dirKey === '' ? e.name : `${dirKey}/${e.name}`;
        if (e.isDirectory()) {
          await walk(key);
        } else if (e.isFile() && !e.name.startsWith(LOCAL_TEMP_PREFIX)) {
          const snap = tryParseSnapshotKey(key, this.logger);
          if (!snap) continue;
          try {
            snap.sizeBytes = (await stat(this.resolve(key))).size;
          } catch (err) {
            if (isCode(err, 'ENOENT')) continue; // deleted while listing
            throw err;
          }
          snaps.push(snap);
        }
      }
    };
    await walk(base);
    return sortSnapshots(snaps);
  }

  /** No stall deadline here: a hung filesystem read cannot be cancelled. The caller's signal still ends the stream. */
  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    this.assertOpen();
    const signal = options?.signal;
    if (signal?.aborted) throw abortReason(signal);
    const key = listedObjectKey(snap);
    const file = this.resolve(key);
    try {
      // Fail here, not on the first read, when the object is missing.
      const st = await stat(file);
      if (!st.isFile()) throw new InternalError('E_NOT_A_FILE', 'not a regular file');
      const stream = createReadStream(file, {
        // 1 MiB reads, not 64 KiB: a restore reads whole objects, and every chunk is a thread-pool round trip.
        highWaterMark: 1 << 20,
        ...(range ? { start: range.start, ...(range.end !== undefined ? { end: range.end } : {}) } : {}),
        ...(signal ? { signal } : {}),
      });
      await new Promise<void>((resolve, reject) => {
        stream.once('ready', () => resolve());
        stream.once('error', reject);
      });
      return stream;
    } catch (err) {
      if (signal?.aborted) throw abortReason(signal);
      throw this.mapError(err, key, 'fetch');
    }
  }

  async save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    this.assertOpen();
    const signal = options?.signal;
    const key = objectKey(this.prefix, snap);
    const what = `snapshot ${key} to local store ${this.root}`;
    let target: string;
    try {
      target = this.resolve(key);
    } catch (err) {
      data.destroy();
      throw err;
    }
    const dir = path.dirname(target);
    const tmp = path.join(dir, tempFileName(this.tempTag));
    let renamed = false;
    let out: WriteStream | undefined;
    writing.add(tmp);
    try {
      if (signal?.aborted) throw abortReason(signal);
      await mkdir(dir, { recursive: true, mode: DIR_MODE });
      // `flush` fsyncs before close; pipeline resolves only after the close, so the data is durable.
      out = createWriteStream(tmp, { flags: 'wx', mode: FILE_MODE, flush: true, highWaterMark: 1 << 20 });
      await (signal ? pipeline(data, out, { signal }) : pipeline(data, out));
      // Last chance to honour an abort: after the rename the new object is visible.
      if (signal?.aborted) throw abortReason(signal);
      await rename(tmp, target);
      renamed = true;
      await fsyncDir(dir);
    } catch (err) {
      if (!data.destroyed) data.destroy();
      if (renamed) {
        // Only the directory fsync failed: the object is in place, but its durability is unknown.
        throw new SnapStoreError('E_SAVE_FAILED', `saved ${what} but could not fsync ${dir}: ${describeError(err)}`, {
          cause: err,
        });
      }
      // The file is opened asynchronously: wait until the stream is closed so that the unlink
      // cannot run before the open created the file. ENOENT (never opened) is fine.
      if (out && !out.closed) {
        const closing = new Promise<void>((resolve) => out?.once('close', () => resolve()));
        out.destroy();
        await closing;
      }
      await unlink(tmp).catch((e: unknown) => {
        if (!isCode(e, 'ENOENT')) this.logger.warn({ err: e, file: tmp }, 'could not remove temp file of a failed save');
      });
      throw saveFailed(err, what);
    } finally {
      writing.delete(tmp);
    }
  }

  async delete(snap: Snapshot): Promise<void> {
    this.assertOpen();
    const key = listedObjectKey(snap);
    const file = this.resolve(key);
    try {
      await unlink(file);
    } catch (err) {
      throw this.mapError(err, key, 'delete');
    }
    // Remove directories the object leaves empty: a v1 `Backup-<unix>` dir (upstream), and a v2
    // chunk dir, which would otherwise block saving a file of the same name later.
    const dirs: string[] = [];
    if (snap.isChunk) dirs.push(path.dirname(file));
    if (snap.snapDir !== '') dirs.push(this.resolve(`${stripSlashes(snap.prefix)}/${snap.snapDir}`));
    for (const d of dirs) {
      await rmdir(d).catch((e: unknown) => {
        if (!isCode(e, 'ENOTEMPTY') && !isCode(e, 'EEXIST') && !isCode(e, 'ENOENT')) {
          this.logger.warn({ err: e, dir: d }, 'could not remove empty snapshot directory');
        }
      });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  private assertOpen(): void {
    if (this.closed) throw new SnapStoreError('E_CONFIG', `local store ${this.root} is closed`);
  }

  private mapError(err: unknown, key: string, op: string): SnapStoreError {
    if (err instanceof SnapStoreError) return err;
    if (isCode(err, 'ENOENT') || isCode(err, 'ENOTDIR') || isCode(err, 'EISDIR') || isCode(err, 'E_NOT_A_FILE')) {
      return new SnapStoreError('E_NOT_FOUND', `snapshot ${key} not found in local store ${this.root}`, { cause: err });
    }
    if (isCode(err, 'EACCES') || isCode(err, 'EPERM')) {
      return new SnapStoreError('E_CREDENTIALS', `${op} of ${key} in local store ${this.root} not permitted: ${describeError(err)}`, {
        cause: err,
      });
    }
    return new SnapStoreError('E_UNREACHABLE', `${op} of ${key} in local store ${this.root} failed: ${describeError(err)}`, {
      cause: err,
    });
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const h = await open(dir, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY);
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

function isCode(err: unknown, code: string): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === code;
}

function stripSlashes(p: string): string {
  return p.replace(/^\/+|\/+$/g, '').replace(/^\.$/, '');
}
