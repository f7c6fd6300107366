import { defineConfig } from 'vitest/config';

/**
 * `npm run image-test`: builds the Dockerfile with podman and runs the image (e2e/image), never part of
 * `npm test` (the build alone takes minutes, and it needs root, podman, runc and debootstrap, which
 * `scripts/setup.mjs --image` installs from Debian).
 */
export default defineConfig({
  resolve: {
    conditions: ['development'],
  },
  test: {
    include: ['e2e/image/**/*.test.ts'],
    globalSetup: ['./e2e/image/support/global-setup.ts'],
    testTimeout: 300_000,
    // The image build (beforeAll): npm ci and tsc inside, at low priority on shared cores.
    hookTimeout: 3_600_000,
    maxWorkers: 1,
    fileParallelism: false,
  },
});
