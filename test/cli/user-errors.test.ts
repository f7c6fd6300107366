/**
 * What an operator sees when they get something wrong, from the real process: one line that says what and
 * where, a non-zero exit, no stack trace (only with --log-level=debug), and nothing created or changed.
 */
import { execFile, spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freePort } from '../../src/etcd/ports.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

const bin = fileURLToPath(new URL('../../bin/etcdbrctl', import.meta.url));
const STACK_LINE = /^\s+at /m;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function etcdbrctl(args: string[], env: Record<string, string> = {}, cwd?: string): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** stderr without the AWS SDK's Node version notice that older Node versions print. */
function errorLines(stderr: string): string[] {
  return stderr.split('\n').filter((l) => l.startsWith('Error: '));
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'etcdbr-user-errors-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('read-only commands on a Local store that does not exist', () => {
  it.each([
    [
      'ls',
      (store: string, scratch: string) => [
        'ls',
        '--storage-provider=Local',
        `--store-container=${store}`,
        `--snapstore-temp-directory=${scratch}`,
      ],
    ],
    [
      'restore --dry-run',
      (store: string, scratch: string) => [
        'restore',
        '--dry-run',
        '--storage-provider=Local',
        `--store-container=${store}`,
        `--snapstore-temp-directory=${scratch}`,
      ],
    ],
    [
      'copy (source)',
      (store: string, scratch: string) => [
        'copy',
        '--source-storage-provider=Local',
        `--source-store-container=${store}`,
        `--source-snapstore-temp-directory=${scratch}`,
        '--storage-provider=Local',
        `--store-container=${join(dir, 'destination')}`,
        `--snapstore-temp-directory=${join(dir, 'destination')}`,
      ],
    ],
  ])('%s: one line naming the path, exit 1, nothing created', async (name, argsFor) => {
    const store = join(dir, 'no-such-store');
    const r = await etcdbrctl(argsFor(store, join(dir, 'scratch')), {}, dir);
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`local store directory ${store} does not exist`);
    // The flag to fix is the one that named this store: the source's for copy.
    expect(lines[0]).toContain(name.startsWith('copy') ? 'check --source-store-container' : 'check --store-container');
    expect(r.stderr).not.toMatch(STACK_LINE);
    // Nothing was created: no store, no scratch dir, no restoration temp dir in the working directory.
    expect((await readdir(dir)).filter((e) => e !== 'destination').sort()).toEqual([]);
  });
});

describe('user errors are one clear line without a stack trace', () => {
  it('a bad flag value', async () => {
    const r = await etcdbrctl(['restore', '--storage-provider=Local', `--store-container=${dir}`, '--max-fetchers=abc']);
    expect(r.code).toBe(1);
    expect(errorLines(r.stderr)).toEqual([
      'Error: invalid argument "abc" for "--max-fetchers" flag: strconv.ParseUint: parsing "abc": invalid syntax',
    ]);
    expect(r.stderr).not.toMatch(STACK_LINE);
  });

  it('a missing credentials file', async () => {
    const file = join(dir, 'missing', 'credentials.json');
    const r = await etcdbrctl(['ls', '--storage-provider=S3', '--store-container=bucket'], { AWS_APPLICATION_CREDENTIALS_JSON: file });
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(file);
    expect(lines[0]).toContain('AWS_APPLICATION_CREDENTIALS_JSON');
    expect(lines[0]).toContain('; check the credentials');
    expect(r.stderr).not.toMatch(STACK_LINE);
  });

  it('an unreachable store', async () => {
    const port = await freePort(); // nothing listens there
    const creds = join(dir, 'creds.json');
    await writeFile(
      creds,
      JSON.stringify({
        accessKeyID: 'a',
        secretAccessKey: 'b',
        region: 'us-east-1',
        endpoint: `http://127.0.0.1:${port}`,
        s3ForcePathStyle: true,
      }),
    );
    const r = await etcdbrctl(['restore', '--dry-run', '--storage-provider=S3', '--store-container=bucket'], {
      AWS_APPLICATION_CREDENTIALS_JSON: creds,
    });
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`127.0.0.1:${port}`);
    expect(lines[0]).toContain("; check the store's endpoint");
    expect(r.stderr).not.toMatch(STACK_LINE);
  });

  it('an unreachable etcd', async () => {
    const port = await freePort(); // nothing listens there
    const store = join(dir, 'store');
    const r = await etcdbrctl([
      'snapshot',
      '--storage-provider=Local',
      `--store-container=${store}`,
      `--endpoints=http://127.0.0.1:${port}`,
    ]);
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^Error: cannot reach etcd: .*127\\.0\\.0\\.1:${port}.*; check --endpoints`));
    expect(r.stderr).not.toMatch(STACK_LINE);
  });

  it('a store prefix that leaves the Local store (snapshot keys outside it)', async () => {
    const store = join(dir, 'store');
    await mkdir(store);
    const r = await etcdbrctl(['ls', '--storage-provider=Local', `--store-container=${store}`, '--store-prefix=../elsewhere']);
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`escapes the local store root ${store}`);
    expect(lines[0]).toContain('--store-prefix must name a folder inside --store-container');
    expect(r.stderr).not.toMatch(STACK_LINE);
    expect((await readdir(dir)).sort()).toEqual(['store']);
  });

  it('no store given to a command that needs one', async () => {
    const r = await etcdbrctl(['restore', '--dry-run']);
    expect(r.code).toBe(1);
    expect(errorLines(r.stderr)).toEqual([
      'Error: no store to restore from: give --storage-provider (Local, S3, ABS, GCS, Swift, OSS, ECS or OCS) and --store-container',
    ]);
  });

  it.each([['restore'], ['restore --dry-run']])(
    '%s from an empty store or the wrong prefix: exit 1 naming where it looked, no data dir',
    async (command) => {
      const store = join(dir, 'store');
      await cp(join(UPSTREAM_V023, 'none', 'snapstore'), store, { recursive: true });
      await mkdir(join(dir, 'empty'));
      await mkdir(join(dir, 'work'));
      const extra = command.split(' ').slice(1);
      const dataDir = join(dir, 'work', 'data');
      for (const [container, prefix, where] of [
        [join(dir, 'empty'), '', `Local store ${join(dir, 'empty', 'v2')}`],
        [store, 'etcd-main', `Local store ${join(store, 'etcd-main', 'v2')}`],
      ] as const) {
        await mkdir(join(container, prefix), { recursive: true });
        const args = ['restore', ...extra, '--storage-provider=Local', `--store-container=${container}`, `--data-dir=${dataDir}`];
        const r = await etcdbrctl(prefix === '' ? args : [...args, `--store-prefix=${prefix}`], {}, join(dir, 'work'));
        expect(r.code).toBe(1);
        expect(errorLines(r.stderr)).toEqual([
          `Error: nothing to restore: no snapshots in ${where}; check --storage-provider, --store-container and --store-prefix`,
        ]);
        expect(r.stdout).toBe('');
        expect(await readdir(join(dir, 'work'))).toEqual([]);
      }
    },
  );

  it('restore from a store that holds only deltas says their full snapshot is missing', async () => {
    const store = join(dir, 'store');
    await cp(join(UPSTREAM_V023, 'none', 'snapstore'), store, { recursive: true });
    const fulls = (await readdir(join(store, 'v2'))).filter((f) => f.startsWith('Full-'));
    for (const f of fulls) await rm(join(store, 'v2', f));
    const deltas = (await readdir(join(store, 'v2'))).filter((f) => f.startsWith('Incr-')).length;
    const r = await etcdbrctl(['restore', '--dry-run', '--storage-provider=Local', `--store-container=${store}`], {}, dir);
    expect(r.code).toBe(1);
    expect(errorLines(r.stderr)[0]).toContain(`no full snapshot (only ${deltas} delta snapshots) in Local store ${join(store, 'v2')}`);
  });

  it('server --verify-schedule with encryption recipients but no identity is refused at start-up', async () => {
    const key = join(dir, 'backup.key');
    await promisify(execFile)('age-keygen', ['-o', key]);
    await writeFile(join(dir, 'backup.pub'), (await promisify(execFile)('age-keygen', ['-y', key])).stdout);
    const args = ['server', '--storage-provider=Local', `--store-container=${join(dir, 'store')}`, '--verify-schedule=0 * * * *'];
    const r = await etcdbrctl([...args, `--encryption-recipients-file=${join(dir, 'backup.pub')}`, '--server-port=0'], {}, dir);
    expect(r.code).toBe(1);
    expect(errorLines(r.stderr)).toEqual([
      expect.stringMatching(/^Error: --verify-schedule cannot check the backups this sidecar encrypts/),
    ]);
  });

  it('a corrupt snapshot in the store: the snapshot is named, the data dir is not created; the stack only at debug level', async () => {
    const store = join(dir, 'store');
    await cp(join(UPSTREAM_V023, 'none', 'snapstore'), store, { recursive: true });
    const full = (await readdir(join(store, 'v2'))).find((f) => f.startsWith('Full-'))!;
    await truncate(join(store, 'v2', full), 4096 * 3);
    await mkdir(join(dir, 'work'));
    const args = ['restore', '--storage-provider=Local', `--store-container=${store}`, `--data-dir=${join(dir, 'work', 'data')}`];
    const r = await etcdbrctl(args, {}, join(dir, 'work'));
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(full);
    expect(r.stderr).not.toMatch(STACK_LINE);
    expect(await readdir(join(dir, 'work'))).toEqual([]);

    const debug = await etcdbrctl([...args, '--log-level=5'], {}, join(dir, 'work')); // logrus 5 = debug
    expect(debug.code).toBe(1);
    expect(debug.stderr).toContain('"stack"');
  });

  it.each(['restore', 'initialize', 'compact'])(
    '%s: a restoration temp dir that cannot be made names --restoration-temp-snapshots-dir and the path, given and resolved',
    async (command) => {
      // A file where the default (relative to the working directory) would go: Node's recursive mkdir would
      // have said ENOENT on a read-only root file system, and nothing named the flag (the image test runs it
      // read-only).
      const store = join(dir, 'store');
      await cp(join(UPSTREAM_V023, 'gzip', 'snapstore'), store, { recursive: true });
      const work = join(dir, 'work');
      await mkdir(work);
      await writeFile(join(work, 'default.restoration.tmp'), '');
      const dataDir = command === 'compact' ? [] : [`--data-dir=${join(dir, 'data', 'new.etcd')}`];
      const args = [
        command,
        '--storage-provider=Local',
        `--store-container=${store}`,
        `--snapstore-temp-directory=${join(dir, 'tmp')}`,
        ...dataDir,
      ];
      const r = await etcdbrctl(args, {}, work);
      expect(r.code, r.stderr).toBe(1);
      expect(errorLines(r.stderr)).toEqual([
        `Error: --restoration-temp-snapshots-dir default.restoration.tmp (${join(work, 'default.restoration.tmp')}): cannot create the restoration temp directory: ${join(work, 'default.restoration.tmp')} is not a directory; give --restoration-temp-snapshots-dir a writable directory (an emptyDir or the data volume)`,
      ]);
      expect(r.stderr).not.toMatch(STACK_LINE);
      expect(await readdir(work)).toEqual(['default.restoration.tmp']);
      expect(await readdir(dir)).not.toContain('data');
      // An absolute path is named once, with the system's own reason.
      const under = join(work, 'default.restoration.tmp', 'sub');
      const abs = await etcdbrctl([...args, `--restoration-temp-snapshots-dir=${under}`], {}, work);
      expect(errorLines(abs.stderr)).toEqual([
        `Error: --restoration-temp-snapshots-dir ${under}: cannot create the restoration temp directory: ENOTDIR: not a directory, stat '${under}'; give --restoration-temp-snapshots-dir a writable directory (an emptyDir or the data volume)`,
      ]);
    },
  );

  it('an uncompressed full snapshot whose sha256 trailer is wrong: both hashes in hex, as verify shows them', async () => {
    const store = join(dir, 'store');
    await cp(join(UPSTREAM_V023, 'none', 'snapstore'), store, { recursive: true });
    const full = join(
      store,
      'v2',
      (await readdir(join(store, 'v2'))).find((f) => f.startsWith('Full-'))!,
    );
    const bytes = await readFile(full);
    const stored = Buffer.from(bytes.subarray(bytes.length - 32));
    bytes[bytes.length - 1]! ^= 0xff; // the trailer, not the database: etcd's own hash check sees it
    await writeFile(full, bytes);
    await mkdir(join(dir, 'work'));
    const args = ['restore', '--storage-provider=Local', `--store-container=${store}`, `--data-dir=${join(dir, 'work', 'data')}`];
    const r = await etcdbrctl(args, {}, join(dir, 'work'));
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`expected sha256 ${bytes.subarray(bytes.length - 32).toString('hex')}, got ${stored.toString('hex')}`);
    expect(lines[0]).not.toMatch(/\[\d+ \d+/);
    expect(await readdir(join(dir, 'work'))).toEqual([]);
  });
});
