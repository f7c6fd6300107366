import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../src/clock.js';
import { createLogger } from '../src/log.js';
import { collectDecision, fullGc, loadMallocTrim, startNativeHeapTrimmer, trimDecision, type MemoryReading } from '../src/native-heap.js';

const MiB = 1024 * 1024;
const reading = (rssMiB: number, externalMiB = 10): MemoryReading => ({ rss: rssMiB * MiB, external: externalMiB * MiB });

describe('trimDecision', () => {
  const last = { after: reading(80), released: 0, collected: reading(80) };

  it('leaves an idle process alone', () => {
    expect(trimDecision(reading(80), last)).toBe(false);
    expect(trimDecision(reading(81.5), last)).toBe(false);
  });

  it('trims when the RSS moved either way since the last trim', () => {
    expect(trimDecision(reading(95), last)).toBe(true);
    expect(trimDecision(reading(77), last)).toBe(true);
  });

  it('trims when the garbage collector freed buffers since the last trim, though the RSS did not move', () => {
    expect(trimDecision(reading(80, 8.5), last)).toBe(true);
    expect(trimDecision(reading(80, 9.5), last)).toBe(false);
  });

  it('trims again while trims release memory', () => {
    expect(trimDecision(reading(80), { ...last, released: 6 * MiB })).toBe(true);
    expect(trimDecision(reading(80), { ...last, released: 0.5 * MiB })).toBe(false);
  });
});

describe('collectDecision', () => {
  it('asks for a full collection once the RSS stands 8 MiB above the reading after the last one', () => {
    const last = { after: reading(85), released: 0, collected: reading(80) };
    expect(collectDecision(reading(87.9), last)).toBe(false);
    expect(collectDecision(reading(88), last)).toBe(true);
    expect(collectDecision(reading(95), { ...last, collected: reading(90) })).toBe(false);
  });
});

describe('startNativeHeapTrimmer', () => {
  const logger = createLogger({ destination: { write: () => undefined } });

  it('trims on the tick after a burst, goes on while trims release memory, then stops trimming', async () => {
    const clock = new FakeClock(0);
    let now = reading(80);
    const trims: number[] = [];
    // Each trim gives back half of what is above 80 MiB, as glibc gives back the free pages it finds.
    const trim = (): void => {
      trims.push(clock.now().getTime());
      now = reading(80 + (now.rss / MiB - 80) / 2);
    };
    const trimmer = await startNativeHeapTrimmer({ clock, logger, intervalMs: 1000, read: () => now, trim });
    clock.advance(3000);
    expect(trims).toEqual([]);
    now = reading(96); // a full snapshot went through
    clock.advance(1000);
    expect(trims).toEqual([4000]);
    clock.advance(10_000);
    // 96 -> 88 -> 84 -> 82 -> 81 -> 80.5: each released >= 1 MiB until the last
    expect(trims).toEqual([4000, 5000, 6000, 7000, 8000]);
    trimmer.stop();
    now = reading(120);
    clock.advance(5000);
    expect(trims).toHaveLength(5);
    expect(clock.pending).toBe(0);
  });

  it('runs a full garbage collection before the trim when the RSS stands 8 MiB above the last one, not for smaller moves', async () => {
    const clock = new FakeClock(0);
    let now = reading(80);
    let live = 80; // what a collection and a trim leave
    const calls: string[] = [];
    const trimmer = await startNativeHeapTrimmer({
      clock,
      logger,
      intervalMs: 1000,
      read: () => now,
      collect: () => calls.push('collect'),
      trim: () => {
        calls.push('trim');
        now = reading(live);
      },
    });
    clock.advance(3000);
    expect(calls).toEqual([]);
    now = reading(84); // warming up after start: a trim alone
    live = 83;
    clock.advance(1000);
    expect(calls).toEqual(['trim']);
    calls.length = 0;
    now = reading(95); // a burst ended: 15 MiB above the start
    live = 84;
    clock.advance(1000);
    expect(calls).toEqual(['collect', 'trim']);
    calls.length = 0;
    clock.advance(1000); // that trim released 11 MiB: one more trim, but 84 is the new mark
    expect(calls).toEqual(['trim']);
    calls.length = 0;
    now = reading(100); // memory that stays: one collection, then no more while it stays
    live = 98;
    clock.advance(1000);
    expect(calls).toEqual(['collect', 'trim']);
    calls.length = 0;
    now = reading(101);
    clock.advance(5000);
    expect(calls).not.toContain('collect');
    trimmer.stop();
  });

  it('does nothing, and says so once, when malloc_trim cannot be loaded', async () => {
    const lines: string[] = [];
    const clock = new FakeClock(0);
    const trimmer = await startNativeHeapTrimmer({
      clock,
      logger: createLogger({ destination: { write: (s: string) => void lines.push(s) } }),
      load: async () => ({ problem: 'not built' }),
    });
    expect(clock.pending).toBe(0);
    expect(lines.join('')).toContain('malloc_trim is not available');
    expect(lines.join('')).toContain('not built');
    trimmer.stop();
  });
});

describe('fullGc', () => {
  it('collects an unreachable object, though this process was started without --expose-gc', async () => {
    expect(process.execArgv.join(' ')).not.toContain('expose-gc');
    const gc = fullGc();
    expect(gc).toBeTypeOf('function');
    let ref: WeakRef<object> | undefined;
    (() => {
      const big = { payload: new Array(10_000).fill(0) };
      ref = new WeakRef(big);
    })();
    // A WeakRef keeps its target for the rest of the job that made it.
    await new Promise((r) => setImmediate(r));
    gc?.();
    expect(ref?.deref()).toBeUndefined();
  });
});

describe('the malloc-trim addon', () => {
  it('is built by npm ci and loads on this glibc machine', async () => {
    const loaded = await loadMallocTrim();
    expect(loaded.problem).toBeUndefined();
    expect(typeof loaded.trim).toBe('function');
  });

  it('hands freed chunks between live ones back to the OS', () => {
    // A child with --expose-gc: 96 MiB of 64 KiB buffers (malloc'd, below glibc's mmap threshold) interleaved
    // with small ones that stay; the big ones are dropped and collected. Their pages stay in the RSS until
    // the trim, as after a full snapshot.
    const addon = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'malloc-trim', 'index.cjs');
    const script = `
      const { trim } = require(${JSON.stringify(addon)});
      const rss = () => process.memoryUsage.rss();
      let big = [], keep = [];
      for (let i = 0; i < 1536; i++) { big.push(Buffer.allocUnsafeSlow(64 * 1024).fill(1)); keep.push(Buffer.allocUnsafeSlow(2048).fill(2)); }
      big = null; gc(); gc();
      const before = rss();
      trim();
      const after = rss();
      process.stdout.write(JSON.stringify({ before, after, kept: keep.length }));
    `;
    const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], {
      encoding: 'utf8',
      env: { ...process.env, MALLOC_ARENA_MAX: '1' },
    });
    expect(r.status, r.stderr).toBe(0);
    const { before, after } = JSON.parse(r.stdout) as { before: number; after: number };
    expect(before - after).toBeGreaterThan(64 * MiB);
  });
});
