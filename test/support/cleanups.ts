import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';

export interface Cleanups {
  /** Runs `undo` after the current test; the last pushed runs first. */
  push(undo: () => Promise<unknown>): void;
  /** A fresh temp dir `<prefix>XXXXXX`, removed after the current test. */
  tempDir(prefix: string): Promise<string>;
}

/** What the tests of the calling file start, undone after each test (also a failed one). */
export function cleanupAfterEach(): Cleanups {
  const undos: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (undos.length > 0) await undos.pop()?.();
  });
  return {
    push: (undo) => void undos.push(undo),
    async tempDir(prefix) {
      const dir = await mkdtemp(join(tmpdir(), prefix));
      undos.push(() => rm(dir, { recursive: true, force: true }));
      return dir;
    },
  };
}
