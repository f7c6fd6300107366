import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BoltDB } from '../../src/bbolt/db.js';
import { RestoredBackendError, verifyRestoredBackend } from '../../src/restorer/verify-backend.js';
import { copyDataDir, makeEtcdDataDir, patchFile, type EtcdDataDir } from '../bbolt/fixture.js';

let fixture: EtcdDataDir;
beforeAll(async () => {
  fixture = await makeEtcdDataDir({ keys: 300 });
}, 120_000);
afterAll(async () => {
  await fixture?.cleanup();
});

const dbOf = (dataDir: string) => join(dataDir, 'member', 'snap', 'db');

describe('verifyRestoredBackend', () => {
  it('passes the backend etcd wrote', async () => {
    await expect(verifyRestoredBackend(dbOf(fixture.dataDir))).resolves.toBeUndefined();
  });

  it('refuses a backend with a damaged page, naming the file and the page', async () => {
    const copy = await copyDataDir(fixture, 'damaged');
    const db = await BoltDB.open(dbOf(copy));
    const { pageSize } = db;
    const root = db.meta.root;
    await db.close();
    // The root bucket's page becomes a page of an unknown kind.
    await patchFile(dbOf(copy), root * pageSize + 8, Buffer.from([0x40, 0x00]));
    const err = await verifyRestoredBackend(dbOf(copy)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RestoredBackendError);
    expect((err as RestoredBackendError).code).toBe('E_RESTORED_BACKEND');
    expect((err as Error).message).toContain(dbOf(copy));
    expect((err as Error).message).toMatch(/page \d+/);
    // Once: every problem's message names its page itself.
    expect((err as Error).message).not.toMatch(/page (\d+): page \1:/);
  });

  it('refuses a file that is not bbolt at all', async () => {
    const file = join(fixture.root, 'not-bbolt');
    await writeFile(file, Buffer.alloc(16384, 7));
    const err = await verifyRestoredBackend(file).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RestoredBackendError);
    expect((err as Error).message).toContain('is not a bbolt database');
  });
});
