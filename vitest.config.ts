import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Tests run against the TypeScript sources of the snapstore workspace, no build needed.
    conditions: ['development'],
  },
  test: {
    include: ['snapstore/test/**/*.test.ts', 'test/**/*.test.ts', 'e2e/**/*.test.ts'],
    exclude: ['e2e/bench/**', '**/node_modules/**'],
    globalSetup: ['./test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Integration tests start real etcd processes and emulators; two cores, so keep it modest.
    maxWorkers: 2,
    reporters: ['default', './test/support/summary-reporter.ts'],
  },
});
