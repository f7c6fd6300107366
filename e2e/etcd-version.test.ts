/** The end-to-end tests run on etcd 3.5, which etcd-druid runs (vitest.config.ts puts it first on PATH). */
import { describe, expect, it } from 'vitest';
import { etcdBinaries } from '../test/support/etcd.js';

describe('the end-to-end suite', () => {
  it('runs on etcd 3.5', async () => {
    expect(await (await etcdBinaries()).version()).toMatch(/^3\.5\./);
  });
});
