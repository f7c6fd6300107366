import { defineConfig } from 'vitest/config';

/**
 * `npm run interop`: the interop suite against the real Go etcd-backup-restore (e2e/interop), never part of
 * `npm test` (CI has no Go binary). ETCDBRCTL_PEER names the Go `etcdbrctl`; without it the run fails at once
 * (e2e/interop/support/global-setup.ts).
 */
export default defineConfig({
  resolve: {
    conditions: ['development'],
  },
  test: {
    include: ['e2e/interop/**/*.test.ts'],
    globalSetup: ['./e2e/interop/support/global-setup.ts', './test/support/global-setup.ts'],
    // Whatever a test starts ends with its worker, also when the worker is killed (test/support/reap-children.ts);
    // the etcd line the peer's version needs (3.4 for v0.23, 3.5 for v0.41 and later), set in each worker.
    setupFiles: ['./test/support/reap-children.ts', './e2e/interop/support/etcd-setup.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    // Each case runs etcds, both tools and s3rver; one file at a time is what two shared cores take.
    maxWorkers: 1,
    fileParallelism: false,
  },
});
