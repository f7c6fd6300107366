/**
 * Bursts of CPU work inside a long-lived process, run with the short commands' speed-first settings.
 *
 * The long-lived commands (server, snapshot) run memory-first: before anything loads, bin/etcdbrctl turns on
 * V8's `--optimize-for-size` and makes Node's Buffer pool slabs 8 KiB, and leaves MEMORY_FIRST_MARK on the
 * global object with what it set. That suits a sidecar that mostly waits. A restore inside the sidecar (its
 * initialization: how etcd-druid's pods restore a lost volume) is a burst of the same work as `etcdbrctl
 * restore`, and those settings slowed it: with `--optimize-for-size`, V8 grows the old generation in small
 * steps and collected it ~2.4 times as long (a CPU profile of the 100,000-revision bench chain: 491 against
 * 207 ms of garbage collection), and below 4 KiB is all the 8 KiB pool serves, so most chunks of the fetch and
 * the replay were allocated on their own. Measured on that chain through `/initialization/start`, four runs
 * each: 2.14–2.47 s memory-first, 1.61–1.75 s speed-first (docs/performance.md).
 *
 * So for the duration of such work the process runs speed-first, and memory-first again when the last of
 * it ends; the heap trimmer (native-heap.ts) hands the memory back after the burst, as after a full snapshot.
 * V8 reads the flag as it decides, so switching it at run time takes effect for what it decides next, the way
 * bin/etcdbrctl sets it at run time in the first place.
 */
import { setFlagsFromString } from 'node:v8';

/** What bin/etcdbrctl leaves on `globalThis` in a memory-first process: the Buffer pool sizes it chose between. */
export const MEMORY_FIRST_MARK = Symbol.for('etcdbrctl.memoryFirst');

export interface MemoryFirstMark {
  /** The pool size the memory-first process runs with. */
  memoryFirstPoolSize: number;
  /** Node's own, which the short commands keep. */
  speedFirstPoolSize: number;
}

/** What the switch changes: Node's Buffer pool and V8's flags (replaceable in tests). */
export interface ProcessSettings {
  setPoolSize(bytes: number): void;
  setV8Flags(flags: string): void;
}

const REAL_SETTINGS: ProcessSettings = {
  setPoolSize: (bytes) => {
    Buffer.poolSize = bytes;
  },
  setV8Flags: (flags) => setFlagsFromString(flags),
};

let running = 0;

/**
 * Runs `work` speed-first when this process is memory-first (MEMORY_FIRST_MARK set), as it is otherwise.
 * Overlapping calls share one switch: memory-first again only when the last one ends, failed or not.
 */
export async function speedFirstDuring<T>(work: () => Promise<T>, settings: ProcessSettings = REAL_SETTINGS): Promise<T> {
  const mark = (globalThis as { [MEMORY_FIRST_MARK]?: MemoryFirstMark })[MEMORY_FIRST_MARK];
  if (mark === undefined) return work();
  if (running++ === 0) {
    settings.setV8Flags('--no-optimize-for-size');
    settings.setPoolSize(mark.speedFirstPoolSize);
  }
  try {
    return await work();
  } finally {
    if (--running === 0) {
      settings.setV8Flags('--optimize-for-size');
      settings.setPoolSize(mark.memoryFirstPoolSize);
    }
  }
}
