import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createDecompressStream, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { PayloadVerifier } from '../backup/full-verify.js';
import { overlapOf, payloadFile } from './overlap.js';
import { namingWorkDir, TEMP_DIR_FLAG } from './work-dirs.js';

export interface FetchedDelta {
  snap: Snapshot;
  /** The decompressed, hash-checked payload on local disk; the consumer deletes it. */
  file: string;
  /**
   * Leading events the delta shares with the one before it in the chain (overlap.ts), checked identical:
   * a reader skips them (DeltaPayloadParserOptions.skipEvents). 0 or absent: none.
   */
  skipEvents?: number;
}

export interface FetchOptions {
  maxFetchers: number;
  tempDir: string;
  signal?: AbortSignal;
  /** Told of each delta that overlaps the one before it (the events both hold are applied once). */
  onOverlap?: (delta: Snapshot, previous: Snapshot, sharedEvents: number) => void;
  /**
   * Until this settles (either way), one download at a time, then up to `maxFetchers`: a restore passes the
   * base snapshot's own download, which comes first.
   */
  oneAtATimeUntil?: Promise<unknown>;
}

/**
 * The chain's deltas on local disk, in order, each with the events it shares with the one before it marked
 * (see FetchedDelta.skipEvents), so that every reader applies each revision once. A delta is handed out only
 * after the next one was compared with it (one file more on disk); a mismatch rejects with
 * DeltaOverlapMismatchError naming both objects.
 */
export async function* fetchDeltasInOrder(store: SnapStore, deltas: readonly Snapshot[], opts: FetchOptions): AsyncGenerator<FetchedDelta> {
  let held: FetchedDelta | undefined;
  try {
    for await (const fetched of fetchEach(store, deltas, opts)) {
      const next: FetchedDelta = { ...fetched };
      if (held) {
        const p = held;
        const { skip } = await overlapOf(
          payloadFile(p.snap.snapName, p.snap.lastRevision, p.file),
          payloadFile(next.snap.snapName, next.snap.lastRevision, next.file),
        );
        if (skip > 0) {
          next.skipEvents = skip;
          opts.onOverlap?.(next.snap, p.snap, skip);
        }
      }
      const ready = held;
      held = next;
      if (ready) yield ready;
    }
    const last = held;
    held = undefined;
    if (last) yield last;
  } finally {
    if (held) await rm(held.file, { force: true });
  }
}

/**
 * Downloads deltas with up to `maxFetchers` in flight, decompressing and checking each one's sha256 on
 * the way to a temp file, and hands them out strictly in chain order. At most `maxFetchers` files wait
 * on disk at any time, so disk use is bounded by the largest deltas, not by the chain.
 */
async function* fetchEach(store: SnapStore, deltas: readonly Snapshot[], opts: FetchOptions): AsyncGenerator<FetchedDelta> {
  const inFlight = new Map<number, Promise<FetchedDelta>>();
  let next = 0;
  /** The delta being waited for (the lowest not yet handed out); -1 once this generator has ended. */
  let waitingFor = 0;
  let width = opts.oneAtATimeUntil ? 1 : Math.max(1, opts.maxFetchers);
  const fill = () => {
    while (waitingFor >= 0 && next < deltas.length && next < waitingFor + width) start(next++);
  };
  const widen = () => {
    width = Math.max(1, opts.maxFetchers);
    fill();
  };
  opts.oneAtATimeUntil?.then(widen, widen);
  const start = (i: number) => {
    const snap = deltas[i]!;
    const file = join(opts.tempDir, `delta-${String(i).padStart(8, '0')}-${snap.snapName.replaceAll('/', '_')}`);
    const p = (async () => {
      const name = snap.snapName;
      // The store ends a download that stalls (its fetch deadline) or that the signal aborts.
      const raw = await store.fetch(snap, undefined, opts.signal ? { signal: opts.signal } : {});
      // 1 MiB buffered (the default is 16 KiB): fewer, larger writes of the inflated payload.
      const out = createWriteStream(file, { mode: 0o600, highWaterMark: 1 << 20 });
      let writeFailure: unknown;
      out.once('error', (err) => (writeFailure = err));
      try {
        await pipeline(
          raw,
          createDecompressStream(snap.compressionSuffix, name),
          new PayloadVerifier(`delta snapshot ${name}`, 'delta'),
          out,
          opts.signal ? { signal: opts.signal } : {},
        );
      } catch (err) {
        // Only the file's own failure is about the temp dir; the store's and the payload's keep their errors.
        if (err !== writeFailure) throw err;
        throw namingWorkDir(err, `delta snapshot ${name}`, file, TEMP_DIR_FLAG);
      }
      return { snap, file };
    })();
    // Failures surface when the consumer reaches this delta; until then keep them from being unhandled.
    p.catch(() => undefined);
    inFlight.set(i, p);
  };
  try {
    for (let i = 0; i < deltas.length; i++) {
      waitingFor = i;
      fill();
      const got = await inFlight.get(i)!;
      inFlight.delete(i);
      yield got;
    }
  } finally {
    waitingFor = -1;
    // Stop early (error or consumer gone): wait for downloads and remove their files.
    const leftovers = await Promise.allSettled(inFlight.values());
    for (const r of leftovers) if (r.status === 'fulfilled') await rm(r.value.file, { force: true });
  }
}

/** Fetched deltas whose downloads are already under way (startFetching); `close` ends them and removes their files. */
export interface StartedFetch<T> extends AsyncIterableIterator<T> {
  close(): Promise<void>;
}

/**
 * Starts `source` now rather than when its consumer first asks: the first step (for fetchDeltasInOrder,
 * every download up to `maxFetchers` and the first delta's overlap check) runs while the caller does
 * something else, such as the base restore. Its result, or its failure, is handed to the first `next`; a
 * failure nobody asks for is dropped with the source (`close`). Used once, by one consumer.
 */
export function startFetching<T>(source: AsyncGenerator<T>): StartedFetch<T> {
  let first: Promise<IteratorResult<T>> | undefined = source.next();
  // Reported to the consumer when it reaches it; until then (or if it never does) it is not unhandled.
  first.catch(() => undefined);
  const started: StartedFetch<T> = {
    next: () => {
      const step = first ?? source.next();
      first = undefined;
      return step;
    },
    return: (value?: unknown) => {
      first = undefined;
      // An async generator queues this behind a step still running, then runs its `finally` (the cleanup).
      return source.return(value as T);
    },
    close: async () => {
      await started.return!();
    },
    [Symbol.asyncIterator]: () => started,
  };
  return started;
}
