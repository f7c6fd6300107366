import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConsistency } from '../../src/bbolt/check.js';
import { fnv64a } from '../../src/bbolt/format.js';
import { locateAuthFlag, readAuthEnabled, setAuthEnabled } from '../../src/backend/auth-flag.js';
import { BoltPatchError } from '../../src/bbolt/patch.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries } from '../support/etcd.js';

const PS = 4096;
const execFileAsync = promisify(execFile);

interface Entry {
  key: string;
  value: Buffer;
  bucket?: boolean;
}

/** A leaf page body (header + elements + data) with page id `id`; `id` 0 for an inline bucket's page. */
function leafPage(id: number, entries: Entry[], pad: boolean): Buffer {
  const dataLen = entries.reduce((n, e) => n + e.key.length + e.value.length, 0);
  const buf = Buffer.alloc(pad ? PS : 16 + 16 * entries.length + dataLen);
  buf.writeBigUInt64LE(BigInt(id), 0);
  buf.writeUInt16LE(0x02, 8);
  buf.writeUInt16LE(entries.length, 10);
  let data = 16 + 16 * entries.length;
  entries.forEach((e, i) => {
    const el = 16 + 16 * i;
    buf.writeUInt32LE(e.bucket ? 1 : 0, el);
    buf.writeUInt32LE(data - el, el + 4);
    buf.writeUInt32LE(e.key.length, el + 8);
    buf.writeUInt32LE(e.value.length, el + 12);
    data += buf.write(e.key, data, 'latin1');
    data += e.value.copy(buf, data);
  });
  return buf;
}

function bucketHeader(root: number): Buffer {
  const b = Buffer.alloc(16);
  b.writeBigUInt64LE(BigInt(root), 0);
  return b;
}

function metaPage(id: number, root: number, freelist: number, pgid: number, txid: number): Buffer {
  const b = Buffer.alloc(PS);
  b.writeBigUInt64LE(BigInt(id), 0);
  b.writeUInt16LE(0x04, 8);
  const m = 16;
  b.writeUInt32LE(0xed0cdaed, m);
  b.writeUInt32LE(2, m + 4);
  b.writeUInt32LE(PS, m + 8);
  b.writeBigUInt64LE(BigInt(root), m + 16);
  b.writeBigUInt64LE(BigInt(freelist), m + 32);
  b.writeBigUInt64LE(BigInt(pgid), m + 40);
  b.writeBigUInt64LE(BigInt(txid), m + 48);
  b.writeBigUInt64LE(fnv64a(b, m, m + 56), m + 56);
  return b;
}

function freelistPage(id: number, ids: Array<number | bigint>): Buffer {
  const b = Buffer.alloc(PS);
  b.writeBigUInt64LE(BigInt(id), 0);
  b.writeUInt16LE(0x10, 8);
  b.writeUInt16LE(ids.length, 10);
  ids.forEach((x, i) => b.writeBigUInt64LE(BigInt(x), 16 + 8 * i));
  return b;
}

/**
 * A tiny etcd-like backend: page 2 freelist, page 3 root leaf with buckets `auth` and `key`; `auth` is
 * inline or its own leaf (page 4). Page 5 is an empty `key` bucket leaf.
 */
function buildDb(opts: { inline: boolean; flag?: Buffer; free?: Array<number | bigint>; noAuth?: boolean }): Buffer {
  const authEntries: Entry[] = [
    { key: 'authEnabled', value: opts.flag ?? Buffer.from([1]) },
    { key: 'authRevision', value: Buffer.from([0, 0, 0, 0, 0, 0, 0, 3]) },
  ];
  const rootEntries: Entry[] = [];
  const pages: Buffer[] = [];
  if (!opts.noAuth) {
    const value = opts.inline ? Buffer.concat([bucketHeader(0), leafPage(0, authEntries, false)]) : bucketHeader(4);
    rootEntries.push({ key: 'auth', value, bucket: true });
  }
  rootEntries.push({ key: 'key', value: bucketHeader(5), bucket: true });
  // Page 4 is free unless it holds the auth bucket, so every page is either reachable or free.
  const free = opts.free ?? (opts.inline || opts.noAuth ? [4] : []);
  pages.push(metaPage(0, 3, 2, 6, 2), metaPage(1, 3, 2, 6, 1), freelistPage(2, free), leafPage(3, rootEntries, true));
  pages.push(opts.inline || opts.noAuth ? leafPage(4, [], true) : leafPage(4, authEntries, true));
  pages.push(leafPage(5, [], true));
  return Buffer.concat(pages);
}

let dir: string;
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'etcdbr-patch-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(bytes: Buffer): Promise<string> {
  const p = join(dir, `db-${n++}`);
  await writeFile(p, bytes);
  return p;
}

function diff(a: Buffer, b: Buffer): number[] {
  const out: number[] = [];
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) out.push(i);
  return out;
}

describe('setAuthEnabled on synthetic backends', () => {
  it.each([
    ['own leaf page', false, 4],
    ['inline bucket', true, 3],
  ])('flips exactly one byte when auth is in its %s and back', async (_label, inline, pageId) => {
    const original = buildDb({ inline });
    const p = await file(original);
    expect((await checkConsistency(p)).problems).toEqual([]);
    const loc = await locateAuthFlag(p);
    expect(loc).toMatchObject({ enabled: true, pageId, inlineBucket: inline });
    expect(loc!.fileOffset).toBeGreaterThanOrEqual(pageId * PS);
    expect(loc!.fileOffset).toBeLessThan((pageId + 1) * PS);

    expect(await setAuthEnabled(p, false)).toEqual({ previous: true, changed: true });
    const off = await readFile(p);
    expect(diff(original, off)).toEqual([loc!.fileOffset]);
    expect(off[loc!.fileOffset]).toBe(0);
    expect(await readAuthEnabled(p)).toBe(false);
    expect((await checkConsistency(p)).ok).toBe(true);

    expect(await setAuthEnabled(p, false)).toEqual({ previous: false, changed: false });
    expect(await setAuthEnabled(p, true)).toEqual({ previous: false, changed: true });
    expect((await readFile(p)).equals(original)).toBe(true);
  });

  it('does nothing without an auth bucket when asked to disable, and refuses to enable', async () => {
    const original = buildDb({ inline: true, noAuth: true });
    const p = await file(original);
    expect(await locateAuthFlag(p)).toBeUndefined();
    expect(await readAuthEnabled(p)).toBe(false);
    expect(await setAuthEnabled(p, false)).toEqual({ previous: false, changed: false });
    await expect(setAuthEnabled(p, true)).rejects.toThrow(BoltPatchError);
    expect((await readFile(p)).equals(original)).toBe(true);
  });

  it.each([
    ['a byte other than 0 or 1', Buffer.from([2])],
    ['two bytes', Buffer.from([1, 0])],
    ['no bytes', Buffer.alloc(0)],
  ])('refuses a flag value of %s and writes nothing', async (_label, flag) => {
    const original = buildDb({ inline: false, flag });
    const p = await file(original);
    await expect(setAuthEnabled(p, false)).rejects.toThrow(/expected one byte 00 or 01/);
    expect((await readFile(p)).equals(original)).toBe(true);
  });

  it('refuses when the page holding the flag is on the freelist', async () => {
    const original = buildDb({ inline: false, free: [4] });
    const p = await file(original);
    await expect(setAuthEnabled(p, false)).rejects.toThrow(/freelist/);
    expect((await readFile(p)).equals(original)).toBe(true);
  });

  it('refuses a freelist that holds a page id of 2^53 or more, naming it exactly', async () => {
    const original = buildDb({ inline: false, free: [2n ** 53n + 1n] });
    const p = await file(original);
    await expect(setAuthEnabled(p, false)).rejects.toThrow(
      `: freelist page 2 holds page id 9007199254740993 (file offset ${2 * PS + 16}), out of range`,
    );
    expect((await readFile(p)).equals(original)).toBe(true);
  });

  it('refuses a file that is not bbolt', async () => {
    const p = await file(Buffer.alloc(3 * PS, 7));
    await expect(setAuthEnabled(p, false)).rejects.toThrow(/not a bbolt database/);
  });
});

describe('setAuthEnabled on a real etcd backend', () => {
  // The restorer patches only data dirs fresh from `snapshot restore`, whose WAL holds no auth entry. (In a
  // data dir that ran `auth enable` itself, etcd may re-apply that WAL entry at start, over the flag.)
  it('finds the flag etcd wrote, refuses while etcd runs, and etcd honours the flipped flag at start', async () => {
    const binaries = await etcdBinaries();
    const env = { ...process.env, ETCDCTL_API: '3' };
    const source = await startLocalEtcd({ binaries, dataDir: join(dir, 'source'), extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
    const snapshot = join(dir, 'auth.db');
    try {
      const c = new Etcd3({ hosts: source.clientUrl });
      await c.user('root').create('pw');
      await c.user('root').addRole('root');
      await c.put('k').value('v');
      await c.auth.authEnable({});
      c.close();
      await execFileAsync(binaries.etcdctl!, [`--endpoints=${source.clientUrl}`, '--user=root:pw', 'snapshot', 'save', snapshot], { env });
    } finally {
      await source.stop();
    }
    const dataDir = join(dir, 'restored');
    await execFileAsync(binaries.etcdctl!, ['snapshot', 'restore', snapshot, `--data-dir=${dataDir}`], { env });
    const db = join(dataDir, 'member', 'snap', 'db');
    expect(await locateAuthFlag(db)).toMatchObject({ enabled: true, inlineBucket: true });

    let etcd = await startLocalEtcd({ binaries, dataDir, extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
    try {
      await expect(setAuthEnabled(db, false)).rejects.toThrow(/bbolt lock held/);
      await etcd.stop();
      expect(await setAuthEnabled(db, false)).toEqual({ previous: true, changed: true });
      expect((await checkConsistency(db)).problems).toEqual([]);

      etcd = await startLocalEtcd({ binaries, dataDir, extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
      const anon = new Etcd3({ hosts: etcd.clientUrl });
      expect(await anon.get('k').string()).toBe('v');
      await anon.put('k2').value('v2');
      anon.close();
      await etcd.stop();

      expect(await setAuthEnabled(db, true)).toEqual({ previous: false, changed: true });
      expect((await checkConsistency(db)).problems).toEqual([]);
      etcd = await startLocalEtcd({ binaries, dataDir, extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
      const anon2 = new Etcd3({ hosts: etcd.clientUrl });
      await expect(anon2.get('k').string()).rejects.toThrow(/user name is empty/);
      anon2.close();
      const root = new Etcd3({ hosts: etcd.clientUrl, auth: { username: 'root', password: 'pw' } });
      expect(await root.get('k2').string()).toBe('v2');
      root.close();
    } finally {
      await etcd.stop();
    }
  }, 60_000);
});
