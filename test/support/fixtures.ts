import { join } from 'node:path';

/**
 * Snapstores written by the Go etcd-backup-restore v0.23.0, vendored into the repository with the exact
 * state each restores to (test/fixtures/upstream-v0.23/README.md). Tests read them only through this path,
 * so a fresh clone at any location carries everything they need.
 */
export const UPSTREAM_V023 = join(import.meta.dirname, '..', 'fixtures', 'upstream-v0.23');

/**
 * The age format's test vectors from C2SP/CCTV (age/testdata), the subset without passphrases and ASCII
 * armor (test/fixtures/cctv-age/README.md).
 */
export const CCTV_AGE = join(import.meta.dirname, '..', 'fixtures', 'cctv-age', 'testdata');
