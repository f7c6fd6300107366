import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger, type StoreConfig } from '@etcdbrctl/snapstore';
import { RotatingStore } from '../../src/config/store-provider.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

describe('RotatingStore', () => {
  it('callers in parallel get the same open store (none of them a store closed by the other)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-rotating-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const config: StoreConfig = {
      provider: 'Local',
      rootDir: join(dir, 'store'),
      container: 'store',
      prefix: 'v2',
      maxParallelChunkUploads: 1,
      minChunkSize: 5 * 1024 * 1024,
      tempDir: dir,
    };
    let resolved = 0;
    const rotating = new RotatingStore({
      resolve: async () => {
        resolved++;
        return config;
      },
      env: {},
      envPrefix: '',
      logger: silentLogger,
    });
    cleanups.push(() => rotating.close());
    const stores = await Promise.all([rotating.get(), rotating.get(), rotating.get()]);
    expect(new Set(stores).size).toBe(1);
    expect(resolved).toBe(1);
    for (const s of stores) expect(await s.list()).toEqual([]);
    expect(await rotating.get()).toBe(stores[0]);
  });
});
