import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { hexByteLists as hexDigests, restoreBaseSnapshot } from '../../src/restorer/base-restore.js';
import { findEtcdBinaries } from '../../src/etcd/binaries.js';

const FIXTURE = new URL('../fixtures/upstream-v0.23/none/snapstore/v2/Full-00000000-00000283-1795219380', import.meta.url);

describe('a full snapshot with a wrong sha256 names both digests in hex', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('turns Go byte slices of 32 bytes into hex and leaves everything else alone', () => {
    const expected = Buffer.alloc(32, 0xab);
    const got = Buffer.from(Array.from({ length: 32 }, (_, i) => i * 8));
    const go = (b: Buffer): string => `[${[...b].join(' ')}]`;
    expect(hexDigests(`Error: expected sha256 ${go(expected)}, got ${go(got)}`)).toBe(
      `Error: expected sha256 ${expected.toString('hex')}, got ${got.toString('hex')}`,
    );
    expect(hexDigests('members [1 2 3] and [300 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1]')).toBe(
      'members [1 2 3] and [300 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1]',
    );
  });

  it("etcd's restore of a corrupted uncompressed full fails with hex digests", async () => {
    dir = mkdtempSync(join(tmpdir(), 'etcdbr-base-restore-msg-'));
    const bytes = readFileSync(FIXTURE);
    const trailer = bytes.subarray(bytes.length - 32).toString('hex');
    bytes[5000] = (bytes[5000] ?? 0) ^ 0xff;
    const file = join(dir, 'full');
    writeFileSync(file, bytes);
    const binaries = await findEtcdBinaries({ path: process.env['PATH'] ?? '' });
    const restore = restoreBaseSnapshot({
      binaries,
      snapshotFile: file,
      dataDir: join(dir, 'data'),
      name: 'default',
      initialCluster: 'default=http://localhost:2380',
      initialClusterToken: 'etcd-cluster',
      initialAdvertisePeerUrls: ['http://localhost:2380'],
      skipHashCheck: false,
    });
    await expect(restore).rejects.toThrow(new RegExp(`expected sha256 ${trailer}, got [0-9a-f]{64}`));
  });
});
