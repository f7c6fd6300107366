import { cpSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Snapstores written by the Go etcd-backup-restore v0.23.0, vendored into the repository with the exact
 * state each restores to (test/fixtures/upstream-v0.23/README.md). Tests read them only through this path,
 * so a fresh clone at any location carries everything they need.
 */
export const UPSTREAM_V023 = join(import.meta.dirname, '..', 'fixtures', 'upstream-v0.23');

/**
 * Snapstores written by the Go etcd-backup-restore v0.43.0 on etcd 3.5.16 (what etcd-druid v0.37 runs), with
 * the exact state and the source's `hashkv` each restores to (test/fixtures/upstream-v0.43/README.md).
 */
export const UPSTREAM_V043 = join(import.meta.dirname, '..', 'fixtures', 'upstream-v0.43');

/**
 * The age format's test vectors from C2SP/CCTV (age/testdata), the subset without passphrases and ASCII
 * armor (test/fixtures/cctv-age/README.md).
 */
export const CCTV_AGE = join(import.meta.dirname, '..', 'fixtures', 'cctv-age', 'testdata');

/**
 * A copy of one of the UPSTREAM_V023 stores (its `snapstore` folder) as `<dir>/store`, for tests that change
 * or break it: returns the container path and its v2 folder.
 */
export function copyUpstreamStore(fixture: string, dir: string): { root: string; v2: string } {
  const root = join(dir, 'store');
  cpSync(join(UPSTREAM_V023, fixture, 'snapstore'), root, { recursive: true });
  return { root, v2: join(root, 'v2') };
}
