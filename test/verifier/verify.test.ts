/**
 * `etcdbrctl verify` on stores written by the Go etcd-backup-restore (vendored fixtures), copied into a temp
 * dir and broken in the ways a store breaks: a damaged delta, a missing delta, a truncated full, a full
 * whose hash is right but whose database is not, a name that claims more than the object holds.
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { BoltDB } from '../../src/bbolt/db.js';
import { main } from '../../src/cli/main.js';
import type { VerifyReport } from '../../src/verifier/verify.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { encryptedUpstreamStore } from '../support/encrypted-store.js';
import { copyUpstreamStore } from '../support/fixtures.js';

const cleanups = cleanupAfterEach();

/** A copy of a Go-written fixture store in a temp dir of this test; returns the container path and its v2 folder. */
async function storeCopy(fixture: string): Promise<{ root: string; v2: string }> {
  return copyUpstreamStore(fixture, await cleanups.tempDir('etcdbr-verify-'));
}

async function verify(root: string, ...extra: string[]): Promise<{ code: number; stdout: string; stderr: string; report?: VerifyReport }> {
  let stdout = '';
  let stderr = '';
  const io = { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } };
  const code = await main(['verify', '--storage-provider=Local', `--store-container=${root}`, ...extra], {}, io, { homeDir: tmpdir() });
  const report = extra.includes('json') && code !== 1 ? (JSON.parse(stdout) as VerifyReport) : undefined;
  return { code, stdout, stderr, ...(report ? { report } : {}) };
}

const BASE = 'Full-00000000-00000301-1795219404.gz';
const DELTAS = [
  'Incr-00000302-00000337-1795219408.gz',
  'Incr-00000338-00000352-1795219411.gz',
  'Incr-00000353-00000355-1795219415.gz',
  'Incr-00000356-00000385-1795219417.gz',
];

describe('etcdbrctl verify', () => {
  it('a sound store: every object checked, restorable to its last revision, exit 0 (text and JSON)', async () => {
    const { root } = await storeCopy('gzip');
    const text = await verify(root);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain('restorable: the newest chain restores to revision 385');
    const { code, report } = await verify(root, '-o', 'json');
    expect(code).toBe(0);
    expect(report!.restorable).toBe(true);
    expect(report!.chains).toHaveLength(1);
    const chain = report!.chains[0]!;
    expect(chain.restorableRevision).toBe(385);
    expect(chain.objects.map((o) => [o.snapName, o.ok, o.revision])).toEqual([
      [BASE, true, 301],
      [DELTAS[0], true, 337],
      [DELTAS[1], true, 352],
      [DELTAS[2], true, 355],
      [DELTAS[3], true, 385],
    ]);
    expect(chain.objects.slice(1).map((o) => o.events)).toEqual([40, 15, 3, 91]);
  });

  it('--all checks every chain; without it only the newest', async () => {
    const { root } = await storeCopy('two-fulls-gzip');
    const newest = await verify(root, '-o', 'json');
    const all = await verify(root, '--all', '-o', 'json');
    expect(newest.report!.chains).toHaveLength(1);
    expect(all.report!.chains.length).toBeGreaterThan(1);
    expect(all.report!.chains.every((c) => c.ok)).toBe(true);
    expect(all.code).toBe(0);
  });

  it('a damaged delta is named, and the chain restores only up to the delta before it (exit 3)', async () => {
    const { root, v2 } = await storeCopy('gzip');
    const file = join(v2, DELTAS[1]!);
    const gz = readFileSync(file);
    // Same length, valid gzip framing, different content: the sha256 trailer no longer matches.
    const payload = gunzipSync(gz);
    payload[100] = payload[100]! ^ 0x01;
    writeFileSync(file, gzipSync(payload));
    const { code, report } = await verify(root, '-o', 'json');
    expect(code).toBe(3);
    expect(report!.restorable).toBe(false);
    expect(report!.firstBroken!.snapName).toBe(DELTAS[1]);
    expect(report!.firstBroken!.problem).toMatch(/sha256|hash/i);
    expect(report!.chains[0]!.restorableRevision).toBe(337);
  });

  it('a missing delta is a gap that names the delta after it', async () => {
    const { root, v2 } = await storeCopy('gzip');
    rmSync(join(v2, DELTAS[2]!));
    const r = await verify(root);
    expect(r.code).toBe(3);
    expect(r.stdout).toContain(`NOT restorable as stored: ${BASE}`);
    expect(r.stdout).toMatch(
      new RegExp(`gap in the delta chain: ${DELTAS[3]} starts at revision 356, but the snapshots before it end at 352`),
    );
  });

  it('a truncated full snapshot is named with what is wrong', async () => {
    const { root, v2 } = await storeCopy('gzip');
    const file = join(v2, BASE);
    const gz = readFileSync(file);
    writeFileSync(file, gz.subarray(0, gz.length - 1000));
    const { code, report } = await verify(root, '-o', 'json');
    expect(code).toBe(3);
    expect(report!.firstBroken!.snapName).toBe(BASE);
    expect(report!.chains[0]!.restorableRevision).toBe(0);
  });

  it('a full snapshot with a correct hash but a broken database fails the bbolt check', async () => {
    const { root, v2 } = await storeCopy('gzip');
    const file = join(v2, BASE);
    const payload = gunzipSync(readFileSync(file));
    const db = Buffer.from(payload.subarray(0, payload.length - 32));
    // Scribble over the header (id, flags, count) of the root page of the `key` bucket, a page every read uses.
    const scratch = join(root, '..', 'db');
    writeFileSync(scratch, db);
    const bolt = await BoltDB.open(scratch);
    const keyRoot = (await bolt.bucket('key'))!.root;
    const pageSize = bolt.pageSize;
    await bolt.close();
    expect(keyRoot).toBeGreaterThan(1);
    db.fill(0xee, pageSize * keyRoot, pageSize * keyRoot + 16);
    const rehashed = Buffer.concat([db, createHash('sha256').update(db).digest()]);
    writeFileSync(file, gzipSync(rehashed));
    const { code, report } = await verify(root, '-o', 'json');
    expect(code).toBe(3);
    expect(report!.firstBroken!.snapName).toBe(BASE);
    expect(report!.firstBroken!.problem).toMatch(/not a consistent bbolt file/);
  });

  it('a delta whose name claims revisions its events do not hold', async () => {
    const { root, v2 } = await storeCopy('gzip');
    const renamed = 'Incr-00000356-00000390-1795219417.gz';
    renameSync(join(v2, DELTAS[3]!), join(v2, renamed));
    const { code, report } = await verify(root, '-o', 'json');
    expect(code).toBe(3);
    expect(report!.firstBroken).toEqual({ snapName: renamed, problem: 'its events end at revision 385, but its name claims 390' });
  });

  it('a store path that does not exist is a command failure (exit 1), not a verdict', async () => {
    const dir = await cleanups.tempDir('etcdbr-verify-missing-');
    const r = await verify(join(dir, 'nope'));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/does not exist/);
  });
});

describe('etcdbrctl verify on encrypted backups', () => {
  const encryptedStore = async () => encryptedUpstreamStore('gzip', await cleanups.tempDir('etcdbr-verify-encrypted-'));

  it('without an identity: "cannot check", exit 1, no object called broken; with it: restorable, exit 0', async () => {
    const { root, identity } = await encryptedStore();
    const without = await verify(root, '-o', 'json');
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/^Error: cannot check: no identity for encrypted objects: cannot decrypt Full-00000000-00000301-/);
    const report = JSON.parse(without.stdout) as VerifyReport;
    expect(report.restorable).toBe(false);
    expect(report.firstBroken).toBeUndefined();
    expect(report.firstUnverifiable?.snapName).toBe(`${BASE}.age`);
    expect(report.chains[0]!.unverifiable).toBe(true);
    expect(report.chains[0]!.objects.every((o) => !o.ok && o.unverifiable === true)).toBe(true);
    const text = await verify(root);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain(`chain ${BASE}.age: NOT CHECKED`);
    expect(text.stdout).not.toContain('BROKEN');

    const withKey = await verify(root, `--encryption-identity-file=${identity}`);
    expect(withKey.code).toBe(0);
    expect(withKey.stdout).toContain('restorable: the newest chain restores to revision 385');
  });

  it('a broken object among encrypted ones that cannot be checked is still broken (exit 3)', async () => {
    const { root } = await encryptedStore();
    // A delta that is not an age file at all: broken whatever the identity.
    writeFileSync(join(root, 'v2', `${DELTAS[1]}.age`), 'not an age file');
    const r = await verify(root, '-o', 'json');
    expect(r.code).toBe(3);
    expect(r.report!.firstBroken?.snapName).toBe(`${DELTAS[1]}.age`);
    expect(r.report!.chains[0]!.unverifiable).toBeUndefined();
  });
});
