import { delimiter } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './test/support/sequencer.js';

/**
 * etcd 3.5, which etcd-druid runs, as Debian trixie packages it; `npm test`'s setup unpacks it
 * (scripts/setup.mjs). The end-to-end tests find it first on PATH; the others use the machine's etcd (3.4 on
 * Debian bookworm), and the restore tests run on both (test/support/etcd.ts etcd35Binaries).
 */
const ETCD35_BIN_DIR = fileURLToPath(new URL('./node_modules/.cache/etcd-3.5.16/usr/bin', import.meta.url));

export default defineConfig({
  resolve: {
    // Tests run against the TypeScript sources of the snapstore workspace, no build needed.
    conditions: ['development'],
  },
  test: {
    // e2e/interop needs the Go binary (ETCDBRCTL_PEER): `npm run interop` runs it, vitest.interop.config.ts.
    // e2e/image builds the image with podman for minutes: `npm run image-test`, vitest.image.config.ts.
    exclude: ['e2e/bench/**', 'e2e/interop/**', 'e2e/image/**', '**/node_modules/**'],
    projects: [
      { extends: true, test: { name: 'unit', include: ['snapstore/test/**/*.test.ts', 'test/**/*.test.ts'] } },
      {
        extends: true,
        test: {
          name: 'e2e-etcd-3.5',
          include: ['e2e/**/*.test.ts'],
          env: { PATH: `${ETCD35_BIN_DIR}${delimiter}${process.env.PATH ?? ''}` },
        },
      },
    ],
    globalSetup: ['./test/support/global-setup.ts'],
    // Whatever a test starts ends with its worker, also when the worker is killed (test/support/reap-children.ts).
    setupFiles: ['./test/support/reap-children.ts'],
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
