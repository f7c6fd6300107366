/**
 * `etcdbrctl compact` and `etcdbrctl copy` as processes (bin/etcdbrctl), black-box: flags, environment,
 * exit codes and output, against an upstream v0.23 store, s3rver and a fake Kubernetes API for the lease.
 * `compact` and `copy` end to end, and a copy killed with SIGKILL
 * mid-copy (Local and S3 destinations): nothing partial becomes visible and a re-run completes it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { openSnapStore, type SnapStore } from '@etcdbrctl/snapstore';
import { LOCAL_TEMP_PREFIX } from '../snapstore/src/providers/local.js';
import { startLocalEtcd } from '../src/etcd/local-etcd.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver, UPLOAD_PART_MARKER } from '../snapstore/test/support/s3rver.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries } from '../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { FakeKubeApiServer, LEASES } from '../test/support/fake-kube.js';
import { BIN, waitFor } from './support/sidecar.js';
import { UPSTREAM_V023 } from '../test/support/fixtures.js';

const COMPAT = UPSTREAM_V023;

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

async function tempDir(tag: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `etcdbr-e2e-${tag}-`));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

interface Running {
  child: ChildProcess;
  exited: Promise<Exit>;
  /** What it wrote so far, stdout then stderr (for a failure's message). */
  output(): string;
}

/** Starts bin/etcdbrctl; a test that fails before the process ended still has it killed. */
function startEtcdbrctl(args: string[], env: NodeJS.ProcessEnv = {}, cwd?: string): Running {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(cwd ? { cwd } : {}),
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  // 'close', not 'exit': the last output may still be in the pipes when the process has exited.
  const exited = new Promise<Exit>((resolve) => child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return { child, exited, output: () => `${stdout}${stderr}` };
}

/**
 * Runs bin/etcdbrctl to its end, killed after `limitMs` (a command here takes seconds: a kill means it hung,
 * and the caller's check of the exit shows its output).
 */
async function etcdbrctl(args: string[], env: NodeJS.ProcessEnv = {}, cwd?: string, limitMs = 120_000): Promise<Exit> {
  const { child, exited } = startEtcdbrctl(args, env, cwd);
  const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
  try {
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}

async function storeFiles(root: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) await walk(p, `${rel}${e.name}/`);
      else
        out.set(
          `${rel}${e.name}`,
          createHash('sha256')
            .update(await readFile(p))
            .digest('hex'),
        );
    }
  };
  await walk(root, '');
  return out;
}

const restoreFlags = (dir: string) => [
  '--initial-cluster=default=http://127.0.0.1:2380',
  '--initial-advertise-peer-urls=http://127.0.0.1:2380',
  `--restoration-temp-snapshots-dir=${join(dir, 'restore-tmp')}`,
];

describe('etcdbrctl compact', () => {
  it('45: compacts the gzip store into one restorable full snapshot and renews the full snapshot lease', async () => {
    const dir = await tempDir('compact');
    const root = join(dir, 'store');
    await cp(join(COMPAT, 'gzip', 'snapstore'), root, { recursive: true });
    const before = await storeFiles(root);
    const kube = await FakeKubeApiServer.start();
    cleanups.push(() => kube.stop());
    const ns = 'shoot--dev--compact';
    kube.seed(LEASES, { metadata: { name: 'etcd-main-full-snap', namespace: ns }, spec: { holderIdentity: '301' } });
    await writeFile(join(dir, 'kubeconfig'), kube.kubeconfig());

    const r = await etcdbrctl(
      [
        'compact',
        '--storage-provider=Local',
        `--store-container=${root}`,
        `--data-dir=${join(dir, 'compaction.etcd')}`,
        `--restoration-temp-snapshots-dir=${join(dir, 'compaction.tmp')}`,
        '--enable-snapshot-lease-renewal',
        '--full-snapshot-lease-name=etcd-main-full-snap',
      ],
      { KUBECONFIG: join(dir, 'kubeconfig'), POD_NAMESPACE: ns },
    );
    expect(r.code, r.stderr).toBe(0);
    const m = /^Compacted snapshot name : (Full-00000000-00000385-(\d+)\.gz)\n$/.exec(r.stdout);
    expect(m, r.stdout).not.toBeNull();
    const name = (m as RegExpExecArray)[1] as string;
    expect(Math.abs(Number((m as RegExpExecArray)[2]) - Date.now() / 1000)).toBeLessThan(120);
    expect(r.stderr).toContain('Compacted snapshot name : ');
    // Only the new snapshot was added; the throw-away dirs are gone.
    const after = await storeFiles(root);
    expect([...after.keys()].filter((k) => !before.has(k))).toEqual([`v2/${name}`]);
    for (const [k, h] of before) expect(after.get(k)).toBe(h);
    expect(await readdir(dir)).toEqual(expect.not.arrayContaining(['compaction.etcd', 'compaction.etcd.part', 'compaction.tmp']));
    const lease = kube.read(LEASES, ns, 'etcd-main-full-snap') as unknown as { spec: { holderIdentity: string } };
    expect(lease.spec.holderIdentity).toBe('385');

    // `etcdbrctl restore` now starts from the compacted snapshot, with no deltas, and gets the source's state.
    const dataDir = join(dir, 'restored.etcd');
    const restored = await etcdbrctl([
      'restore',
      '--storage-provider=Local',
      `--store-container=${root}`,
      `--data-dir=${dataDir}`,
      ...restoreFlags(dir),
    ]);
    expect(restored.code, restored.stderr).toBe(0);
    const binaries = await etcdBinaries();
    const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
    let got: EtcdDump;
    try {
      got = await dumpEtcd(etcd.clientUrl);
    } finally {
      await etcd.stop();
    }
    const expected = JSON.parse(readFileSync(join(COMPAT, 'gzip', 'expected.json'), 'utf8')) as EtcdDump;
    expect(got.revision).toBe(385);
    const strip = (kvs: EtcdDump['kvs']) => kvs.map(({ lease: _l, ...rest }) => rest);
    expect(strip(got.kvs)).toEqual(strip(expected.kvs));
  });

  it('a tampered delta: exit 1 naming it, the store unchanged', async () => {
    const dir = await tempDir('compact-bad');
    const root = join(dir, 'store');
    await cp(join(COMPAT, 'none', 'snapstore'), root, { recursive: true });
    const victim = 'Incr-00000322-00000334-1795219387';
    const bytes = await readFile(join(root, 'v2', victim));
    bytes[10] = (bytes[10] as number) ^ 0x04;
    await writeFile(join(root, 'v2', victim), bytes);
    const before = await storeFiles(root);
    const r = await etcdbrctl([
      'compact',
      '--storage-provider=Local',
      `--store-container=${root}`,
      `--data-dir=${join(dir, 'c.etcd')}`,
      `--restoration-temp-snapshots-dir=${join(dir, 'c.tmp')}`,
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(victim);
    expect(r.stdout).toBe('');
    expect(await storeFiles(root)).toEqual(before);
    await expect(stat(join(dir, 'c.etcd.part'))).rejects.toThrow();
    await expect(stat(join(dir, 'c.tmp'))).rejects.toThrow();
  });
});

describe('etcdbrctl copy', () => {
  it('46: Local → S3 with SOURCE_ settings; a re-run copies nothing; a final-snapshot wait that times out still copies', async () => {
    const dir = await tempDir('copy');
    // Upstream's copy takes the destination's --store-prefix for the source too when none is given.
    const root = join(dir, 'source');
    await cp(join(COMPAT, 'final-gzip', 'snapstore'), join(root, 'etcd-main'), { recursive: true });
    const s3 = await startS3rver({ bucket: 'dest' });
    cleanups.push(() => s3.stop());
    const credentials = { accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, region: 'us-east-1', s3ForcePathStyle: true };
    await writeFile(join(dir, 's3.json'), JSON.stringify(credentials));
    const env = { AWS_APPLICATION_CREDENTIALS_JSON: join(dir, 's3.json'), SOURCE_STORAGE_CONTAINER: root };
    const flags = [
      'copy',
      '--source-storage-provider=Local',
      '--storage-provider=S3',
      '--store-container=dest',
      '--store-prefix=etcd-main',
      `--store-endpoint-override=${s3.endpoint}`,
    ];

    const first = await etcdbrctl(flags, env);
    expect(first.code, first.stderr).toBe(0);
    const sourceFiles = await storeFiles(join(root, 'etcd-main'));
    expect(first.stdout).toMatch(new RegExp(`^Copied ${sourceFiles.size} snapshot\\(s\\), \\d+ bytes; 0 already present\\n$`));

    const dest: SnapStore = await openSnapStore({
      provider: 'S3',
      container: 'dest',
      prefix: 'etcd-main/v2',
      endpointOverride: s3.endpoint,
      maxParallelChunkUploads: 3,
      minChunkSize: 5 * 1024 * 1024,
      tempDir: dir,
      credentials,
    });
    cleanups.push(() => dest.close());
    const copied = new Map<string, string>();
    for (const s of await dest.list()) {
      const h = createHash('sha256');
      for await (const c of await dest.fetch(s)) h.update(c as Buffer);
      copied.set(`v2/${s.snapName}`, h.digest('hex'));
    }
    expect(copied).toEqual(new Map([...sourceFiles].map(([k, h]) => [k.replace(/\.final$/, ''), h])));

    const again = await etcdbrctl([...flags, '--wait-for-final-snapshot'], env);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain('Final full snapshot detected');
    expect(again.stdout).toBe(`Copied 0 snapshot(s), 0 bytes; ${sourceFiles.size} already present\n`);

    // No final among the newest 4 fulls of a store without one: waits for the timeout, then copies.
    const plain = join(dir, 'plain');
    await cp(join(COMPAT, 'zlib', 'snapstore'), join(plain, 'other'), { recursive: true });
    const timed = await etcdbrctl(
      [
        ...flags,
        '--wait-for-final-snapshot',
        '--wait-for-final-snapshot-timeout=1s',
        `--source-store-container=${plain}`,
        '--store-prefix=other',
      ],
      env,
    );
    expect(timed.code, timed.stderr).toBe(0);
    // The copier reports the timeout (its own clock); the FakeClock cases in test/copier check the polling.
    expect(timed.stderr).toContain('Timed out waiting for final full snapshot');
    expect(timed.stdout).toMatch(/^Copied 5 snapshot\(s\)/);
  });

  it('a corrupt source object: exit 1 naming it, the rest copied', async () => {
    const dir = await tempDir('copy-bad');
    const root = join(dir, 'source');
    await cp(join(COMPAT, 'lzw', 'snapstore'), root, { recursive: true });
    const victim = 'Incr-00000285-00000298-1795219436.Z';
    const bytes = await readFile(join(root, 'v2', victim));
    await writeFile(join(root, 'v2', victim), bytes.subarray(0, bytes.length >> 1));
    const dest = join(dir, 'dest');
    const r = await etcdbrctl([
      'copy',
      `--source-storage-provider=Local`,
      `--source-store-container=${root}`,
      '--storage-provider=Local',
      `--store-container=${dest}`,
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`etcdbrctl copy: snapshot ${victim} in the source store is corrupt`);
    expect(r.stderr).toContain('1 snapshot(s) failed, 4 copied, 0 already present');
    expect((await readdir(join(dest, 'v2'))).sort()).toEqual((await readdir(join(root, 'v2'))).filter((n) => n !== victim).sort());
  });
});

describe('etcdbrctl copy killed with SIGKILL mid-copy', () => {
  const FULL_MIB = 40;
  const MiB = 1024 * 1024;
  const sha256 = (b: Buffer): Buffer => createHash('sha256').update(b).digest();

  /**
   * A Local store of 3 full snapshots of 40 MiB (bbolt-sized random bodies) each followed by 3 gzip
   * deltas of ~256 KiB, every object with a valid sha256 trailer, so the copier's integrity check passes.
   * Returns snapshot name → sha256 of the stored bytes.
   */
  async function writeLargeSource(root: string): Promise<Map<string, string>> {
    const v2 = join(root, 'v2');
    await mkdir(v2, { recursive: true });
    const out = new Map<string, string>();
    const put = async (name: string, bytes: Buffer): Promise<void> => {
      await writeFile(join(v2, name), bytes);
      out.set(name, sha256(bytes).toString('hex'));
    };
    const rev8 = (n: number): string => String(n).padStart(8, '0');
    let rev = 0;
    let second = 1_795_300_000;
    for (let f = 0; f < 3; f++) {
      rev += 1000;
      const body = randomBytes(FULL_MIB * MiB);
      await put(`Full-00000000-${rev8(rev)}-${++second}`, Buffer.concat([body, sha256(body)]));
      for (let d = 0; d < 3; d++) {
        const events = Buffer.from(
          JSON.stringify([
            {
              type: 'put',
              kv: { key: Buffer.from(`/k/${rev + 1}`).toString('base64'), value: randomBytes(192 * 1024).toString('base64') },
            },
          ]),
        );
        await put(`Incr-${rev8(rev + 1)}-${rev8(rev + 100)}-${++second}.gz`, gzipSync(Buffer.concat([events, sha256(events)])));
        rev += 100;
      }
    }
    return out;
  }

  /** Snapshot name → sha256, for every snapshot the store lists, read back through the store. */
  async function listedContents(store: SnapStore): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    for (const s of await store.list()) {
      const h = createHash('sha256');
      for await (const c of await store.fetch(s)) h.update(c as Buffer);
      out.set(s.snapName, h.digest('hex'));
    }
    return out;
  }

  interface Destination {
    flags: string[];
    env: NodeJS.ProcessEnv;
    open(): Promise<SnapStore>;
    /** True once the destination shows the copy under way: an object committed and another half-written. */
    underWay(): Promise<boolean>;
    /** What the destination holds outside the listing API: committed object names, and half-written leftovers. */
    raw(): Promise<{ objects: string[]; partial: string[] }>;
  }

  /**
   * Each step's bound: a step takes seconds, and one run of the Local case (1.5 s here) timed out at the test's
   * 60 s in CI without saying where. Three steps fit in KILL_TEST_TIMEOUT_MS, so a hang names its step.
   */
  const STEP_LIMIT_MS = 45_000;
  const KILL_TEST_TIMEOUT_MS = 4 * STEP_LIMIT_MS;

  /** Polls until `cond` holds or the process ends; SIGKILLs it in the first case. */
  async function killWhen(run: Running, cond: () => Promise<boolean>, pollMs: number): Promise<Exit> {
    let ended = false;
    void run.exited.then(() => (ended = true));
    const outcome = await waitFor(
      async () => (ended ? 'ended' : (await cond()) ? 'due' : undefined),
      'the moment to kill the process',
      STEP_LIMIT_MS,
      pollMs,
    ).catch((err: unknown) => {
      throw new Error(`${err instanceof Error ? err.message : String(err)}; its output so far:\n${run.output()}`);
    });
    if (outcome === 'due') run.child.kill('SIGKILL');
    return run.exited;
  }

  async function killMidCopyThenResume(source: string, expected: Map<string, string>, dest: Destination): Promise<void> {
    const flags = ['copy', '--source-storage-provider=Local', `--source-store-container=${source}`, ...dest.flags];
    const killed = await killWhen(startEtcdbrctl(flags, dest.env), () => dest.underWay(), 5);
    expect(killed.signal, `the copy ended before it could be killed mid-copy: ${killed.stdout}${killed.stderr}`).toBe('SIGKILL');

    // Whatever is visible is whole: each listed object is byte-identical to its source; the interrupted
    // objects exist only as leftovers no listing shows.
    const store = await dest.open();
    cleanups.push(() => store.close());
    const visible = await listedContents(store);
    expect(visible.size).toBeGreaterThan(0);
    expect(visible.size).toBeLessThan(expected.size);
    for (const [name, hash] of visible) expect(hash, name).toBe(expected.get(name));
    const raw = await dest.raw();
    expect(raw.objects.sort()).toEqual([...visible.keys()].sort());
    expect(raw.partial.length).toBeGreaterThan(0);

    const resumed = await etcdbrctl(flags, dest.env, undefined, STEP_LIMIT_MS);
    expect(resumed.code, resumed.stderr).toBe(0);
    const m = /^Copied (\d+) snapshot\(s\), \d+ bytes; (\d+) already present\n$/.exec(resumed.stdout);
    expect(m, resumed.stdout).not.toBeNull();
    expect(Number(m?.[1])).toBe(expected.size - visible.size);
    expect(Number(m?.[2])).toBe(visible.size);
    expect(await listedContents(store)).toEqual(expected);
    expect((await dest.raw()).objects.sort()).toEqual([...expected.keys()].sort());

    const third = await etcdbrctl(flags, dest.env, undefined, STEP_LIMIT_MS);
    expect(third.code, third.stderr).toBe(0);
    expect(third.stdout).toBe(`Copied 0 snapshot(s), 0 bytes; ${expected.size} already present\n`);
  }

  it(
    'Local → Local: killed while objects are half-written, nothing partial is listed; a re-run completes, a third copies nothing',
    async () => {
      const dir = await tempDir('copy-kill-local');
      const source = join(dir, 'source');
      const expected = await writeLargeSource(source);
      const dest = join(dir, 'dest');
      const v2 = join(dest, 'v2');
      await mkdir(v2, { recursive: true });
      const entries = async () => readdir(v2).catch(() => [] as string[]);
      const isTemp = (name: string) => name.startsWith(LOCAL_TEMP_PREFIX);
      await killMidCopyThenResume(source, expected, {
        flags: ['--storage-provider=Local', `--store-container=${dest}`],
        env: {},
        open: () =>
          openSnapStore({
            provider: 'Local',
            rootDir: dest,
            container: dest,
            prefix: 'v2',
            maxParallelChunkUploads: 5,
            minChunkSize: 5 * MiB,
            tempDir: dir,
          }),
        async underWay() {
          const names = await entries();
          return names.some(isTemp) && names.some((n) => !isTemp(n));
        },
        // The half-written objects stay behind as hidden temp files, which no listing shows and nothing
        // reads; the re-run writes those objects again under fresh temp names.
        async raw() {
          const names = await entries();
          return { objects: names.filter((n) => !isTemp(n)), partial: names.filter(isTemp) };
        },
      });
    },
    KILL_TEST_TIMEOUT_MS,
  );

  it(
    'Local → S3: killed with a multipart upload in flight, nothing partial is listed; a re-run completes, a third copies nothing',
    async () => {
      const dir = await tempDir('copy-kill-s3');
      const source = join(dir, 'source');
      const expected = await writeLargeSource(source);
      const s3 = await startS3rver({ bucket: 'dest' });
      cleanups.push(() => s3.stop());
      const credentials = {
        accessKeyID: S3RVER_ACCESS_KEY,
        secretAccessKey: S3RVER_SECRET_KEY,
        region: 'us-east-1',
        s3ForcePathStyle: true,
      };
      await writeFile(join(dir, 's3.json'), JSON.stringify(credentials));
      // s3rver has no ListMultipartUploads; its data directory shows unfinished uploads and their parts.
      const rawKeys = async () => {
        const keys = await s3.rawKeys();
        return {
          objects: keys.filter((k) => !k.includes(UPLOAD_PART_MARKER)).map((k) => k.replace(/^v2\//, '')),
          partial: keys.filter((k) => k.includes(UPLOAD_PART_MARKER)),
        };
      };
      await killMidCopyThenResume(source, expected, {
        flags: ['--storage-provider=S3', '--store-container=dest', `--store-endpoint-override=${s3.endpoint}`],
        env: { AWS_APPLICATION_CREDENTIALS_JSON: join(dir, 's3.json') },
        open: () =>
          openSnapStore({
            provider: 'S3',
            container: 'dest',
            prefix: 'v2',
            endpointOverride: s3.endpoint,
            maxParallelChunkUploads: 5,
            minChunkSize: 5 * MiB,
            tempDir: dir,
            credentials,
          }),
        async underWay() {
          const { objects, partial } = await rawKeys();
          return objects.length > 0 && partial.some((k) => k.includes('/part='));
        },
        raw: rawKeys,
      });
    },
    KILL_TEST_TIMEOUT_MS,
  );
});
