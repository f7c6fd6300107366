/**
 * Gives the native heap's free pages back to the OS, for the commands that stay up (`server`, `snapshot`).
 *
 * Node's native buffers (socket reads, HTTP/2 frames, zlib and file chunks of 16-64 KiB) come from glibc's
 * malloc. A full snapshot streams gigabytes through such chunks; once they are freed they sit between live
 * allocations, and glibc returns only the free space at the top of a heap. Measured on `server` after a
 * 1.1 GiB full snapshot (Local, uncompressed): RSS stayed at 95 MiB against 80 idle, and glibc's
 * malloc_trim(0), which releases free pages anywhere in every arena, brought it to 81 MiB. Mapping every
 * chunk on its own instead (MALLOC_MMAP_THRESHOLD_) gave the same memory but cost 1.3-1.5x the snapshot's
 * time; a trim now and then costs a few milliseconds.
 *
 * When to trim (`trimDecision`, pure): on a tick, when the RSS moved by `movedBytes` or more since the last
 * trim (work happened: buffers were allocated and freed); when the memory V8 holds outside its heap
 * (`process.memoryUsage().external`: Buffers and other ArrayBuffers) fell by `releasedBytes` or more since
 * then (the garbage collector freed buffers after the burst, which leaves the RSS as it was); or when the
 * last trim released `releasedBytes` or more (more may follow). An idle process does none of these and is
 * not trimmed at all.
 *
 * The trim itself is glibc's malloc_trim through @etcdbrctl/malloc-trim (a small Node-API addon built by
 * `npm ci`). Without it (not built, or a C library other than glibc) nothing is trimmed; the log says so once.
 *
 * Before a trim, V8's full garbage collection (`fullGc`) when the RSS stands `collectBytes` or more above the
 * reading after the last collection (`collectDecision`, pure): Buffers that outlived two young-generation
 * collections during a burst (file reads waiting in a socket's queue, say) die in the old generation, and
 * only a full collection frees them. V8 runs one when the old generation grows, which a quiet sidecar may not
 * do for minutes: measured after an uncompressed 1.1 GiB full snapshot to S3 (parts sent from files), the RSS
 * stayed ~12 MiB above idle for 60-90 s without it. A full collection of the sidecar's small heap takes ~10 ms.
 * Not on every trim: the RSS moves by a few MiB for a while after start, and a collection every 15 s then
 * cost the idle sidecar 2-3 ms of CPU a second. Memory that stays live after a collection raises the mark, so
 * a sidecar that holds more for good is not collected again and again.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Clock, TimerHandle } from './clock.js';
import type { Logger } from './log.js';

const MiB = 1024 * 1024;

export interface TrimPolicy {
  /** A change of the RSS since the last trim, either way, that means work happened. */
  movedBytes: number;
  /** What a trim must have released for the next tick to trim again. */
  releasedBytes: number;
  /** How far the RSS must stand above the reading after the last full garbage collection for another one. */
  collectBytes: number;
}

export const DEFAULT_TRIM_POLICY: TrimPolicy = { movedBytes: 2 * MiB, releasedBytes: 1 * MiB, collectBytes: 8 * MiB };

/** The process's memory as the trimmer reads it, in bytes. */
export interface MemoryReading {
  rss: number;
  /** V8's memory outside its heap (Buffers, ArrayBuffers), mostly from malloc. */
  external: number;
}

/**
 * What the trimmer knows of the last trim: the reading right after it, how much RSS it released, and the
 * reading after the last full garbage collection (at start: the first reading).
 */
export interface LastTrim {
  after: MemoryReading;
  released: number;
  collected: MemoryReading;
}

/** Whether to run a full garbage collection (and then trim) on this tick. */
export function collectDecision(now: MemoryReading, last: LastTrim, policy: TrimPolicy = DEFAULT_TRIM_POLICY): boolean {
  return now.rss - last.collected.rss >= policy.collectBytes;
}

export function trimDecision(now: MemoryReading, last: LastTrim, policy: TrimPolicy = DEFAULT_TRIM_POLICY): boolean {
  return (
    Math.abs(now.rss - last.after.rss) >= policy.movedBytes ||
    last.after.external - now.external >= policy.releasedBytes ||
    last.released >= policy.releasedBytes
  );
}

/** The effects the trimmer needs; real ones by default. */
export interface NativeHeapTrimmerOptions {
  clock: Clock;
  logger: Logger;
  /** Time between two looks at the RSS. */
  intervalMs?: number;
  policy?: TrimPolicy;
  read?: () => MemoryReading;
  /** The trim; from `load` when absent. */
  trim?: () => unknown;
  /** Where the trim comes from when `trim` is absent (default loadMallocTrim). */
  load?: () => Promise<{ trim?: () => unknown; problem?: string }>;
  /** The full garbage collection `collectDecision` asks for (default `fullGc()`; none where it is not available). */
  collect?: () => void;
}

export interface NativeHeapTrimmer {
  stop(): void;
}

/** A look every 15 s: a minute after a burst ends, up to three trims have run after it. */
export const TRIM_INTERVAL_MS = 15_000;

/**
 * V8's full garbage collection. Node has no API for it: the flag is set at run time and the function taken
 * from a fresh context, where V8 installs it once the flag is on (the main context's global stays as it was).
 * Undefined where that fails.
 */
export function fullGc(): (() => void) | undefined {
  try {
    setFlagsFromString('--expose-gc');
    const gc: unknown = runInNewContext('gc');
    return typeof gc === 'function' ? () => void (gc as () => unknown)() : undefined;
  } catch {
    return undefined;
  }
}

/** glibc's malloc_trim(0) from the addon, or undefined (and why) when it cannot be loaded here. */
export async function loadMallocTrim(): Promise<{ trim?: () => unknown; problem?: string }> {
  try {
    const { trim } = await import('@etcdbrctl/malloc-trim');
    // undefined: built without glibc (musl), where there is nothing to call.
    if (trim() === undefined) return { problem: 'the C library has no malloc_trim (not glibc)' };
    return { trim };
  } catch (err) {
    return { problem: (err as Error).message };
  }
}

export async function startNativeHeapTrimmer(opts: NativeHeapTrimmerOptions): Promise<NativeHeapTrimmer> {
  const { clock, logger } = opts;
  let trim = opts.trim;
  if (trim === undefined) {
    const loaded = await (opts.load ?? loadMallocTrim)();
    if (loaded.trim === undefined) {
      logger.info(
        { reason: loaded.problem },
        'freed native memory is not handed back to the OS early: malloc_trim is not available (RSS stays higher after a full snapshot)',
      );
      return { stop: () => undefined };
    }
    trim = loaded.trim;
  }
  const read = opts.read ?? readMemory;
  const collect = 'collect' in opts ? opts.collect : fullGc();
  const policy = opts.policy ?? DEFAULT_TRIM_POLICY;
  const intervalMs = opts.intervalMs ?? TRIM_INTERVAL_MS;
  const first = read();
  let last: LastTrim = { after: first, released: 0, collected: first };
  let timer: TimerHandle | undefined;
  let stopped = false;
  const tick = (): void => {
    timer = undefined;
    if (stopped) return;
    const before = read();
    const collecting = collect !== undefined && collectDecision(before, last, policy);
    if (collecting || trimDecision(before, last, policy)) {
      if (collecting) collect();
      trim();
      const after = read();
      last = { after, released: Math.max(0, before.rss - after.rss), collected: collecting ? after : last.collected };
      logger.debug(
        { rssBeforeMiB: round1(before.rss / MiB), rssAfterMiB: round1(after.rss / MiB), collected: collecting },
        'native heap trimmed',
      );
    }
    timer = clock.setTimeout(tick, intervalMs);
  };
  timer = clock.setTimeout(tick, intervalMs);
  return {
    stop() {
      stopped = true;
      if (timer !== undefined) clock.clearTimeout(timer);
      timer = undefined;
    },
  };
}

function readMemory(): MemoryReading {
  const { rss, external } = process.memoryUsage();
  return { rss, external };
}

const round1 = (n: number): number => Math.round(n * 10) / 10;
