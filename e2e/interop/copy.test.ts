/**
 * `copy` between a Local store and S3 (s3rver) by one tool, restored by the other, both ways round: a chain
 * written live by one tool is copied Local → S3 by the other tool, restored from S3 by the first; copied back
 * S3 → Local by the first tool and restored from there by the second. Every hop keeps every object's name and
 * bytes, and every restore gives the source's keys, values, revisions and versions.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { cleanupAfterEach } from '../../test/support/cleanups.js';
import { backupLive } from './support/backup-live.js';
import { expectGoDropsOnlyLeases, localStore, restoreWith, runOk, withoutLeases, type Cleanups, type Tool } from './support/tools.js';

const after = cleanupAfterEach();
const cleanups: Cleanups = [];
// Its own hook: one pushed onto `after` would run once, after the first test, and never again (each run of
// `after` empties it), leaving every later test's etcds running. Registered after `after`'s, so it runs first.
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

const other = (tool: Tool): Tool => (tool === 'ours' ? 'go' : 'ours');

/** name → sha256 of every object in a Local store's v2 folder. */
async function localObjects(container: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const name of (await readdir(join(container, 'v2'))).sort()) {
    out.set(
      name,
      createHash('sha256')
        .update(await readFile(join(container, 'v2', name)))
        .digest('hex'),
    );
  }
  return out;
}

describe.each<Tool>(['ours', 'go'])('a chain written by %s', (writer) => {
  it(`${other(writer)} copies Local → S3, ${writer} restores from S3; ${writer} copies S3 → Local, ${other(writer)} restores`, async () => {
    const copier = other(writer);
    const dir = await after.tempDir(`etcdbr-interop-copy-${writer}-`);
    const backup = await backupLive({ tool: writer, compression: 'gzip', dir }, cleanups);
    const s3 = await startS3rver({ bucket: 'backups' });
    cleanups.push(() => s3.stop());
    // One credentials file both tools read: the Go tool takes the endpoint from it (v0.23 has no endpoint flag).
    const creds = join(dir, 's3.json');
    await writeFile(
      creds,
      JSON.stringify({
        accessKeyID: S3RVER_ACCESS_KEY,
        secretAccessKey: S3RVER_SECRET_KEY,
        region: 'us-east-1',
        endpoint: s3.endpoint,
        s3ForcePathStyle: true,
      }),
    );
    const s3Store = ['--storage-provider=S3', '--store-container=backups'];
    const temp = [`--snapstore-temp-directory=${dir}`, `--source-snapstore-temp-directory=${dir}`];

    await runOk(
      copier,
      ['copy', '--source-storage-provider=Local', `--source-store-container=${backup.container}`, ...s3Store, ...temp],
      { AWS_APPLICATION_CREDENTIALS_JSON: creds },
      cleanups,
    );
    const sourceObjects = await localObjects(backup.container);
    expect([...sourceObjects.keys()]).toEqual(backup.names.slice().sort());
    const inS3 = (await s3.rawKeys()).sort();
    expect(inS3).toEqual([...sourceObjects.keys()].map((n) => `v2/${n}`));

    const fromS3 = await restoreWith(writer, s3Store, dir, cleanups, { env: { AWS_APPLICATION_CREDENTIALS_JSON: creds }, tag: 'from-s3' });
    expect(withoutLeases(fromS3)).toEqual(withoutLeases(backup.source));

    const back = join(dir, 'back');
    await runOk(
      writer,
      ['copy', '--source-storage-provider=S3', '--source-store-container=backups', ...localStore(back), ...temp],
      { SOURCE_AWS_APPLICATION_CREDENTIALS_JSON: creds },
      cleanups,
    );
    // Two copies later every object is still the bytes the writer stored, under its name.
    expect(await localObjects(back)).toEqual(sourceObjects);
    const fromLocal = await restoreWith(copier, localStore(back), dir, cleanups, { tag: 'from-local' });
    expect(withoutLeases(fromLocal)).toEqual(withoutLeases(backup.source));
    // Ours keeps the leases of the keys a delta carries, the Go tool drops them.
    const [go, ours] = writer === 'go' ? [fromS3, fromLocal] : [fromLocal, fromS3];
    expect(ours).toEqual(backup.source);
    expectGoDropsOnlyLeases(go, ours);
  });
});
