import { afterEach, describe, expect, it } from 'vitest';
import { MEMORY_FIRST_MARK, speedFirstDuring, type MemoryFirstMark, type ProcessSettings } from '../src/speed-first.js';

/** Records what the switch sets, in order, instead of changing this test process's V8 and Buffer pool. */
function recorder(): ProcessSettings & { log: string[] } {
  const log: string[] = [];
  return {
    log,
    setPoolSize: (bytes) => log.push(`pool ${bytes}`),
    setV8Flags: (flags) => log.push(flags),
  };
}

const marked = globalThis as { [MEMORY_FIRST_MARK]?: MemoryFirstMark };

describe('speedFirstDuring', () => {
  afterEach(() => {
    delete marked[MEMORY_FIRST_MARK];
  });

  it('changes nothing in a process bin/etcdbrctl did not make memory-first', async () => {
    const settings = recorder();
    expect(await speedFirstDuring(async () => 42, settings)).toBe(42);
    expect(settings.log).toEqual([]);
  });

  it('runs the work speed-first and turns memory-first on again after it', async () => {
    marked[MEMORY_FIRST_MARK] = { memoryFirstPoolSize: 8192, speedFirstPoolSize: 65536 };
    const settings = recorder();
    const seen: string[] = [];
    await speedFirstDuring(async () => {
      seen.push(...settings.log);
    }, settings);
    expect(seen).toEqual(['--no-optimize-for-size', 'pool 65536']);
    expect(settings.log).toEqual(['--no-optimize-for-size', 'pool 65536', '--optimize-for-size', 'pool 8192']);
  });

  it('turns memory-first on again after work that failed, and passes the failure on', async () => {
    marked[MEMORY_FIRST_MARK] = { memoryFirstPoolSize: 8192, speedFirstPoolSize: 65536 };
    const settings = recorder();
    await expect(
      speedFirstDuring(async () => {
        throw new Error('restore failed');
      }, settings),
    ).rejects.toThrow('restore failed');
    expect(settings.log.slice(-2)).toEqual(['--optimize-for-size', 'pool 8192']);
  });

  it('switches once for overlapping work, back only when the last of it ends', async () => {
    marked[MEMORY_FIRST_MARK] = { memoryFirstPoolSize: 8192, speedFirstPoolSize: 65536 };
    const settings = recorder();
    let finishFirst!: () => void;
    const first = speedFirstDuring(() => new Promise<void>((resolve) => (finishFirst = resolve)), settings);
    await speedFirstDuring(async () => undefined, settings);
    expect(settings.log).toEqual(['--no-optimize-for-size', 'pool 65536']);
    finishFirst();
    await first;
    expect(settings.log).toEqual(['--no-optimize-for-size', 'pool 65536', '--optimize-for-size', 'pool 8192']);
  });
});
