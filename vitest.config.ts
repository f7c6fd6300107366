import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './test/support/sequencer.js';

export default defineConfig({
  resolve: {
    // Tests run against the TypeScript sources of the snapstore workspace, no build needed.
    conditions: ['development'],
  },
  test: {
    include: ['snapstore/test/**/*.test.ts', 'test/**/*.test.ts', 'e2e/**/*.test.ts'],
    // e2e/interop needs the Go binary (ETCDBRCTL_PEER): `npm run interop` runs it, vitest.interop.config.ts.
    // e2e/image builds the image with podman for minutes: `npm run image-test`, vitest.image.config.ts.
    exclude: ['e2e/bench/**', 'e2e/interop/**', 'e2e/image/**', '**/node_modules/**'],
    globalSetup: ['./test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Integration tests start real etcd processes and emulators; two cores, so keep it modest.
    maxWorkers: 2,
    // Long files first (cached or committed durations), so both workers stay busy to the end of the run.
    sequence: { sequencer: LongestFirstSequencer },
    reporters: ['default', './test/support/summary-reporter.ts'],
    // Line and branch coverage of the code the test processes run in-process (V8's own counters, cheap).
    // The CLI processes the e2e tests spawn are not counted, so the figure is a floor.
    coverage: {
      enabled: true,
      provider: 'v8',
      include: ['src/**/*.ts', 'snapstore/src/**/*.ts'],
      reporter: ['text-summary', 'json-summary'],
      reportsDirectory: 'coverage',
    },
  },
});
