/**
 * Client-side age encryption end to end, with bin/etcdbrctl processes and a real etcd, on Local, S3
 * (s3rver) and Azure Blob (Azurite): a plain chain, then encryption turned on (the next full starts an
 * encrypted chain, full and deltas encrypted); `ls` shows it; restore without or with a wrong identity fails
 * with a typed error before the data dir exists; restore with the key gives etcd's exact state; compact
 * keeps the result encrypted; copy re-encrypts to a rotated key (old objects readable with both identities,
 * the copies only with the new one); the age CLI opens a stored object; a tampered object stops restore.
 */
import { execFile } from 'node:child_process';
import { access, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { Etcd3 } from 'etcd3';
import { afterEach, describe, expect, it } from 'vitest';
import { openSnapStore, storedBytesStore, type SnapStore, type Snapshot, type StoreConfig } from '@etcdbrctl/snapstore';
import { AZURITE_ACCOUNT, AZURITE_KEY, startAzurite } from '../snapstore/test/support/azurite.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../snapstore/test/support/s3rver.js';
import { startTestEtcd } from '../test/support/etcd.js';
import { dumpEtcd } from '../test/support/etcd-dump.js';
import { runCli, startCli } from './support/cli-process.js';
import { restoreAndDump, restoreFlags } from './support/restore-dump.js';
import { waitFor } from './support/sidecar.js';

const run = promisify(execFile);
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

const start = (args: string[], env: NodeJS.ProcessEnv) => startCli(args, env, cleanups);
const etcdbrctl = (args: string[], env: NodeJS.ProcessEnv) => runCli(args, env, cleanups);

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}

/** A key pair from the reference age-keygen: identity file and recipients file. */
async function keyPair(dir: string, name: string): Promise<{ identity: string; recipients: string; publicKey: string }> {
  const identity = join(dir, `${name}.key`);
  await run('age-keygen', ['-o', identity]);
  const { stdout } = await run('age-keygen', ['-y', identity]);
  const recipients = join(dir, `${name}.pub`);
  await writeFile(recipients, stdout);
  return { identity, recipients, publicKey: stdout.trim() };
}

interface Target {
  flags: string[];
  env: NodeJS.ProcessEnv;
  config: StoreConfig;
  /** Local only: where the objects are, for tampering. */
  root?: string;
}

async function target(provider: 'Local' | 'S3' | 'ABS', dir: string): Promise<Target> {
  const base = { prefix: 'etcd-main/v2', maxParallelChunkUploads: 5, minChunkSize: 5 << 20, tempDir: dir };
  if (provider === 'Local') {
    const root = join(dir, 'store');
    await mkdir(join(root, 'etcd-main', 'v2'), { recursive: true });
    return {
      flags: ['--storage-provider=Local', `--store-container=${root}`, '--store-prefix=etcd-main'],
      env: {},
      config: { ...base, provider: 'Local', container: root, rootDir: root },
      root,
    };
  }
  if (provider === 'S3') {
    const s3 = await startS3rver({ bucket: 'backups' });
    cleanups.push(() => s3.stop());
    const credentials = { accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, region: 'us-east-1', s3ForcePathStyle: true };
    await writeFile(join(dir, 's3.json'), JSON.stringify(credentials));
    return {
      flags: ['--storage-provider=S3', '--store-container=backups', '--store-prefix=etcd-main', `--store-endpoint-override=${s3.endpoint}`],
      env: { AWS_APPLICATION_CREDENTIALS_JSON: join(dir, 's3.json') },
      config: { ...base, provider: 'S3', container: 'backups', endpointOverride: s3.endpoint, credentials },
    };
  }
  const azurite = await startAzurite();
  cleanups.push(() => azurite.stop());
  await azurite.createContainer('backups');
  const credentials = { storageAccount: AZURITE_ACCOUNT, storageKey: AZURITE_KEY };
  await writeFile(join(dir, 'abs.json'), JSON.stringify(credentials));
  return {
    flags: [
      '--storage-provider=ABS',
      '--store-container=backups',
      '--store-prefix=etcd-main',
      `--store-endpoint-override=${azurite.accountEndpoint}`,
    ],
    env: { AZURE_APPLICATION_CREDENTIALS_JSON: join(dir, 'abs.json') },
    config: { ...base, provider: 'ABS', container: 'backups', endpointOverride: azurite.accountEndpoint, credentials },
  };
}

interface LsRow {
  kind: string;
  startRevision: number;
  lastRevision: number;
  encrypted: boolean;
  key: string;
}

async function ls(t: Target, extra: string[] = []): Promise<LsRow[]> {
  const r = await etcdbrctl(['ls', ...t.flags, '-o', 'json', ...extra], t.env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as LsRow[];
}

/**
 * The store's snapshots as the test process lists them: waiting on the snapshotter polls this, not `etcdbrctl
 * ls` (a process per poll costs a Node start and competes with the snapshotter for the CPU); `ls` itself is
 * checked once the snapshots are there.
 */
async function listed(store: SnapStore): Promise<Snapshot[]> {
  return (await store.list()).filter((s) => !s.isChunk);
}

/** Runs `etcdbrctl snapshot` until a delta covers `revision`, then stops it. */
async function snapshotUntil(
  t: Target,
  endpoint: string,
  revision: number,
  extra: string[],
  afterFull?: () => Promise<number>,
): Promise<void> {
  const store = await openSnapStore(t.config, { readOnly: true });
  cleanups.push(() => store.close());
  const fullsBefore = (await listed(store)).filter((r) => r.kind === 'Full').length;
  const { child, exited } = start(
    [
      'snapshot',
      `--endpoints=${endpoint}`,
      ...t.flags,
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1s',
      '--garbage-collection-period=0s',
      ...extra,
    ],
    t.env,
  );
  const encrypted = extra.some((f) => f.startsWith('--encryption-recipients-file'));
  await waitFor(
    async () => ((await listed(store)).filter((r) => r.kind === 'Full').length > fullsBefore ? true : undefined),
    'a new full snapshot',
  );
  const target = afterFull ? await afterFull() : revision;
  await waitFor(
    async () =>
      (await listed(store)).some((r) => r.kind === 'Incr' && r.lastRevision >= target && (r.isEncrypted ?? false) === encrypted)
        ? true
        : undefined,
    `a delta snapshot up to revision ${target}`,
  );
  child.kill('SIGTERM');
  const exit = await exited;
  expect(exit.code, exit.stderr).toBe(0);
}

describe.each(['Local', 'S3', 'ABS'] as const)('encrypted backups on %s', (provider) => {
  it(
    'plain then encrypted chain; restore, compact and copy with re-encryption; bad keys and tampering are refused',
    { timeout: 300_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), `etcdbr-e2e-enc-${provider}-`));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const oldKey = await keyPair(dir, 'old');
      const newKey = await keyPair(dir, 'new');
      const stranger = await keyPair(dir, 'stranger');
      const t = await target(provider, dir);
      const etcd = await startTestEtcd();
      cleanups.push(() => etcd.cleanup());
      const client = new Etcd3({ hosts: etcd.clientUrl });
      cleanups.push(async () => client.close());
      const put = async (prefix: string, n: number): Promise<number> => {
        let rev = 0;
        for (let i = 0; i < n; i++)
          rev = Number(
            (
              await client
                .put(`${prefix}/${i}`)
                .value(`v${i}-${'x'.repeat(i * 10)}`)
                .exec()
            ).header.revision,
          );
        return rev;
      };

      // A plain chain first, as the Go tool writes it.
      await put('plain', 20);
      await snapshotUntil(t, etcd.clientUrl, 0, [], () => put('plain-delta', 5));
      expect((await ls(t)).every((r) => !r.encrypted)).toBe(true);

      // Encryption on: the next full starts an encrypted chain; the plain objects stay as they are.
      await snapshotUntil(t, etcd.clientUrl, 0, [`--encryption-recipients-file=${oldKey.recipients}`], () => put('secret', 30));
      const rows = await ls(t);
      const newestFull = rows.filter((r) => r.kind === 'Full').at(-1) as LsRow;
      // The new chain is that full and the deltas after its revision. Not "every row listed after it": the plain
      // chain's last delta can carry the same second as the new full and then be listed after it.
      const chain = [newestFull, ...rows.filter((r) => r.kind === 'Incr' && r.startRevision > newestFull.lastRevision)];
      expect(chain.length).toBeGreaterThanOrEqual(2);
      expect(
        chain.every((r) => r.encrypted && /\.gz\.age$/.test(r.key)),
        JSON.stringify(chain),
      ).toBe(true);
      expect(rows.some((r) => !r.encrypted)).toBe(true);
      const expected = await dumpEtcd(etcd.clientUrl);

      // No identity, then a wrong one: a typed error naming the object and its recipients; no data dir.
      const dataDir = join(dir, 'restored.etcd');
      const none = await etcdbrctl(['restore', ...t.flags, ...restoreFlags(dir, dataDir)], t.env);
      expect(none.code).not.toBe(0);
      expect(none.stderr).toMatch(
        /cannot decrypt .*Full-00000000-\d+-\d+\.gz\.age: it is encrypted to 1 X25519 recipient stanza; no identity was given/,
      );
      const wrong = await etcdbrctl(
        ['restore', ...t.flags, ...restoreFlags(dir, dataDir), `--encryption-identity-file=${stranger.identity}`],
        t.env,
      );
      expect(wrong.code).not.toBe(0);
      expect(wrong.stderr).toContain(`none of the identities given opens it: ${stranger.publicKey}`);
      expect(await exists(dataDir)).toBe(false);
      expect(await exists(`${dataDir}.part`)).toBe(false);

      // The key through the environment: etcd's exact state.
      const env = { ...t.env, ENCRYPTION_IDENTITY_FILE: `${stranger.identity},${oldKey.identity}` };
      expect(await restoreAndDump({ flags: t.flags, env, dir, dataDir }, cleanups)).toEqual(expected);
      await rm(dataDir, { recursive: true, force: true });

      // verify reads the encrypted chain.
      const verified = await etcdbrctl(['verify', ...t.flags, `--encryption-identity-file=${oldKey.identity}`], t.env);
      expect(verified.code, verified.stdout + verified.stderr).toBe(0);

      // Compact: the result is encrypted too, and restores to the same state.
      const compactDir = join(dir, 'compaction.etcd');
      const compactArgs = [
        'compact',
        ...t.flags,
        `--data-dir=${compactDir}`,
        `--restoration-temp-snapshots-dir=${join(dir, 'compaction.tmp')}`,
      ];
      const plainCompact = await etcdbrctl([...compactArgs, `--encryption-identity-file=${oldKey.identity}`], t.env);
      expect(plainCompact.code).not.toBe(0);
      expect(plainCompact.stderr).toContain('give --encryption-recipients-file');
      const compacted = await etcdbrctl(
        [...compactArgs, `--encryption-identity-file=${oldKey.identity}`, `--encryption-recipients-file=${oldKey.recipients}`],
        t.env,
      );
      expect(compacted.code, compacted.stderr).toBe(0);
      expect(compacted.stdout).toMatch(/^Compacted snapshot name : Full-00000000-\d+-\d+\.gz\.age\n$/);
      const again = await restoreAndDump(
        { flags: [...t.flags, `--encryption-identity-file=${oldKey.identity}`], env: t.env, dir, dataDir },
        cleanups,
      );
      expect(again.kvs).toEqual(expected.kvs);
      await rm(dataDir, { recursive: true, force: true });

      // Copy with key rotation: everything (plain and encrypted) re-encrypted to the new key only.
      const copyRoot = join(dir, 'copy');
      const copied = await etcdbrctl(
        [
          'copy',
          ...t.flags.map((f) => f.replace(/^--/, '--source-')),
          '--storage-provider=Local',
          `--store-container=${copyRoot}`,
          '--store-prefix=etcd-main',
          `--encryption-identity-file=${oldKey.identity}`,
          `--encryption-recipients-file=${newKey.recipients}`,
        ],
        Object.fromEntries(Object.entries(t.env).map(([k, v]) => [`SOURCE_${k}`, v])),
      );
      expect(copied.code, copied.stderr).toBe(0);
      const copyTarget: Target = {
        flags: ['--storage-provider=Local', `--store-container=${copyRoot}`, '--store-prefix=etcd-main'],
        env: {},
        config: t.config,
      };
      const copiedRows = await ls(copyTarget);
      expect(copiedRows.length).toBeGreaterThan(0);
      expect(copiedRows.every((r) => r.encrypted)).toBe(true);
      const withOld = await etcdbrctl(
        ['restore', ...copyTarget.flags, ...restoreFlags(dir, dataDir), `--encryption-identity-file=${oldKey.identity}`],
        {},
      );
      expect(withOld.code).not.toBe(0);
      expect(await exists(dataDir)).toBe(false);
      const withNew = await restoreAndDump(
        { flags: [...copyTarget.flags, `--encryption-identity-file=${newKey.identity}`], env: {}, dir, dataDir },
        cleanups,
      );
      expect(withNew.kvs).toEqual(expected.kvs);
      await rm(dataDir, { recursive: true, force: true });

      // The reference age CLI opens an object as stored in the provider: gzip inside, the sha256 trailer last.
      const store = await openSnapStore(t.config, { readOnly: true });
      try {
        const full = (await store.list()).filter((s: Snapshot) => s.kind === 'Full' && s.isEncrypted).at(-1) as Snapshot;
        const parts: Buffer[] = [];
        for await (const c of await storedBytesStore(store).fetch(full)) parts.push(c as Buffer);
        const file = join(dir, 'object.age');
        await writeFile(file, Buffer.concat(parts));
        const { stdout } = await run('age', ['-d', '-i', oldKey.identity, file], { encoding: 'buffer', maxBuffer: 1 << 30 });
        const db = gunzipSync(stdout);
        expect(db.length % 4096).toBe(32); // bbolt pages then etcd's sha256 trailer
      } finally {
        await store.close();
      }

      // Tampering (Local, where bytes can be changed in place): restore stops, no data dir.
      if (t.root !== undefined) {
        const v2 = join(t.root, 'etcd-main', 'v2');
        const victim = (await readdir(v2))
          .filter((n) => n.startsWith('Full-') && n.endsWith('.age'))
          .sort()
          .at(-1) as string;
        const bytes = await readFile(join(v2, victim));
        bytes[bytes.length - 100]! ^= 0x01;
        await writeFile(join(v2, victim), bytes);
        const tampered = await etcdbrctl(
          ['restore', ...t.flags, ...restoreFlags(dir, dataDir), `--encryption-identity-file=${oldKey.identity}`],
          t.env,
        );
        expect(tampered.code).not.toBe(0);
        expect(tampered.stderr).toContain('failed authentication');
        expect(await exists(dataDir)).toBe(false);
        expect(await exists(`${dataDir}.part`)).toBe(false);
      }
    },
  );
});
