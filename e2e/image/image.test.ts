/**
 * The container image, built from the Dockerfile with podman and run (`npm run image-test`; not part of
 * `npm test`: the build alone takes minutes). The base images are stand-ins made on this machine and tagged
 * with the Dockerfile's names (support/base-images.ts); everything else is the Dockerfile as written.
 *
 * Containers run as Kubernetes runs them: `--passwd=false` (podman would otherwise add a passwd entry for a
 * user the image lacks, which containerd and CRI-O do not), host networking to reach an etcd on this
 * machine's loopback, and `--read-only --read-only-tmpfs=false` for readOnlyRootFilesystem (podman would
 * otherwise mount a tmpfs on /tmp, which a pod does not get).
 */
import { cp, chmod, chown, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/etcd/ports.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { cleanupAfterEach } from '../../test/support/cleanups.js';
import { dumpEtcd } from '../../test/support/etcd-dump.js';
import { etcd35Binaries, SINGLE_MEMBER_RAFT_ARGS, startTestEtcd } from '../../test/support/etcd.js';
import { UPSTREAM_V023 } from '../../test/support/fixtures.js';
import { waitFor } from '../../test/support/wait.js';
import { dockerfileBaseImages } from './support/base-images.js';
import { IMAGE_TEST_DIR, podman, podmanOk, ROOT, type Ran } from './support/podman.js';

const TAG = 'localhost/etcdbrctl:image-test';
const BUILD_STAGE_TAG = 'localhost/etcdbrctl:image-test-build-stage';
const GIT_SHA = '0123456789abcdef0123456789abcdef01234567';
const NONROOT = 65532;
const MB = 1e6;
/** The store the Go tool v0.23 wrote (test/fixtures/upstream-v0.23/gzip): its full snapshot's key. */
const FULL = 'v2/Full-00000000-00000301-1795219404.gz';
/** The flags of every container: as a pod runs it (see the header). */
const AS_A_POD = ['--rm', '--passwd=false', '--read-only', '--read-only-tmpfs=false'];

const cleanups = cleanupAfterEach();
let containers = 0;

/** A container name of this run; the container is removed after the test, whatever happened. */
function containerName(what: string): string {
  const name = `etcdbrctl-image-test-${process.pid}-${++containers}-${what}`;
  cleanups.push(() => podman(['rm', '--force', '--time', '0', name]));
  return name;
}

/** A temp dir of the test, owned by `uid` (a volume the container writes to). */
async function volume(prefix: string, uid = 0): Promise<string> {
  const dir = await cleanups.tempDir(`etcdbr-image-${prefix}-`);
  await chown(dir, uid, uid);
  return dir;
}

/** A copy of the Go tool's store at `<parent>/<name>`, readable by every user. */
async function goStore(parent: string, name: string, uid = 0): Promise<string> {
  const store = join(parent, name);
  await cp(join(UPSTREAM_V023, 'gzip', 'snapstore'), store, { recursive: true });
  await chmodTree(store, uid);
  return store;
}

async function chmodTree(dir: string, uid: number): Promise<void> {
  await chown(dir, uid, uid);
  await chmod(dir, 0o755);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await chmodTree(p, uid);
    else {
      await chown(p, uid, uid);
      await chmod(p, 0o644);
    }
  }
}

function run(args: string[], timeoutMs = 180_000): Promise<Ran> {
  return podman(['run', ...args], { timeoutMs });
}

/** The last line of a command's stderr (the one-line error of a failed command). */
function lastLine(text: string): string {
  return text.trim().split('\n').at(-1) ?? '';
}

beforeAll(async () => {
  let log = '';
  const build = async (extra: string[]) => {
    const built = await podman(
      ['build', '--pull=never', '--network=host', '--build-arg', `GIT_SHA=${GIT_SHA}`, ...extra, '-f', join(ROOT, 'Dockerfile'), ROOT],
      {
        nice: true,
        timeoutMs: 3_600_000,
        onOutput: (chunk) => (log += chunk),
      },
    );
    await writeFile(join(IMAGE_TEST_DIR, 'build.log'), log);
    if (built.code !== 0)
      throw new Error(
        `podman build of the Dockerfile failed (${built.code}); the end of .local/image-test/build.log:\n${log.slice(-6000)}`,
      );
  };
  // The build stage is tagged too, so that the prune below keeps it: its layers are the next run's cache
  // (npm ci takes minutes), while earlier runs' images, untagged now, go (1.6 GB a build stage).
  await build(['--target', 'build', '-t', BUILD_STAGE_TAG]);
  await build(['-t', TAG]);
  await podmanOk(['image', 'prune', '--force']);
});

describe('the image built from the Dockerfile', () => {
  it('prints the version with the Git SHA given as a build argument', async () => {
    const r = await run([...AS_A_POD, '--network=none', TAG, '--version']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^etcdbrctl Version: \\d+\\.\\d+\\.\\d+\\nGit SHA: ${GIT_SHA}\\nNode Version: v\\d+\\.\\d+\\.\\d+\\nOS/Arch: linux/x64\\n$`,
      ),
    );
  });

  it('holds no npm, npx, corepack, yarn or Node headers, and their bytes are gone, not hidden by a later layer', async () => {
    const r = await run([
      ...AS_A_POD,
      '--network=none',
      '--entrypoint',
      '/bin/sh',
      TAG,
      '-c',
      'ls -d /usr/local/include/node /usr/local/lib/node_modules /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack /usr/local/bin/yarn 2>/dev/null; du -sb /app | cut -f1',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines.length, r.stdout).toBe(1);
    const appBytes = Number(lines[0]);

    const bases = dockerfileBaseImages();
    const slim = bases.find((b) => b.endsWith('-slim'))!;
    const etcd = bases.find((b) => b.startsWith('gcr.io/etcd-development/etcd:'))!;
    const size = async (image: string) => Number((await podmanOk(['image', 'inspect', '--format', '{{.Size}}', image])).trim());
    const inBase = await run([
      '--rm',
      '--network=none',
      '--entrypoint',
      '/bin/sh',
      slim,
      '-c',
      'du -sbc /usr/local/include/node /usr/local/lib/node_modules | tail -1 | cut -f1',
    ]);
    expect(inBase.code, inBase.stderr).toBe(0);
    const removedBytes = Number(inBase.stdout.trim());
    const [imageSize, slimSize, etcdSize] = [await size(TAG), await size(slim), await size(etcd)];
    process.stdout.write(
      `image ${(imageSize / MB).toFixed(1)} MB = runtime base ${(slimSize / MB).toFixed(1)} MB - npm and Node headers ${(removedBytes / MB).toFixed(1)} MB + etcd ${(etcdSize / MB).toFixed(1)} MB + /app ${(appBytes / MB).toFixed(1)} MB (+ file system overhead)\n`,
    );
    // Hidden by a layer on top, they would still count; 3 MB for tar headers and the user's entry.
    expect(imageSize).toBeLessThan(slimSize - removedBytes + etcdSize + appBytes + 3 * MB);
    expect(removedBytes).toBeGreaterThan(60 * MB);
  });

  it('has passwd entries for root and 65532 and sets no HOME: the runtime sets it per user, as for the Go image', async () => {
    const config = JSON.parse(await podmanOk(['image', 'inspect', '--format', '{{json .Config}}', TAG])) as {
      Env: string[];
      User: string;
      WorkingDir: string;
    };
    expect(config.Env.filter((e) => e.startsWith('HOME='))).toEqual([]);
    expect(config.User).toBe(`${NONROOT}:${NONROOT}`);
    const passwd = await run([
      ...AS_A_POD,
      '--network=none',
      '--entrypoint',
      '/bin/sh',
      TAG,
      '-c',
      'grep -E "^(root|nonroot):" /etc/passwd; ls -ldn /home/nonroot | cut -d" " -f1,3,4',
    ]);
    expect(passwd.code, passwd.stderr).toBe(0);
    expect(passwd.stdout).toBe(
      'root:x:0:0:root:/root:/bin/bash\nnonroot:x:65532:65532::/home/nonroot:/usr/sbin/nologin\ndrwx------ 65532 65532\n',
    );
    for (const [user, home] of [
      [`${NONROOT}:${NONROOT}`, '/home/nonroot'],
      ['0:0', '/root'],
      // No entry: runc's default, as for the Go image.
      ['1234:1234', '/'],
    ] as const) {
      const r = await run([...AS_A_POD, '--network=none', '--user', user, '--entrypoint', '/bin/sh', TAG, '-c', 'echo "$HOME"']);
      expect(r.stdout, user).toBe(`${home}\n`);
    }
  });

  it.each([
    [NONROOT, '/home/nonroot'],
    [0, '/root'],
    [1234, '/'],
  ])('as uid %i finds a relative Local store under %s', async (uid, home) => {
    const dir = await volume('store', uid);
    await goStore(dir, 'backups', uid);
    const r = await run([
      ...AS_A_POD,
      '--network=none',
      '--user',
      `${uid}:${uid}`,
      '-v',
      `${join(dir, 'backups')}:${join(home, 'backups')}`,
      TAG,
      'ls',
      '--storage-provider=Local',
      '--store-container=backups',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(FULL);
  });

  it('as root with the buckets under /root (gardenadm), initialize restores the data dir instead of starting a fresh member', async () => {
    const buckets = await volume('buckets');
    await goStore(buckets, 'bucket');
    const data = await volume('data');
    const restorationTmp = await volume('restoration-tmp');
    const r = await run([
      ...AS_A_POD,
      '--network=none',
      '--user',
      '0:0',
      '-v',
      `${buckets}:/root`,
      '-v',
      `${data}:/var/etcd/data`,
      '-v',
      `${restorationTmp}:/tmp/restorationtmp`,
      TAG,
      'initialize',
      '--storage-provider=Local',
      '--store-container=bucket',
      '--data-dir=/var/etcd/data/new.etcd',
      '--restoration-temp-snapshots-dir=/tmp/restorationtmp',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('"outcome":"restored"');
    expect(await readdir(join(data, 'new.etcd', 'member', 'snap'))).toContain('db');
  });

  it('server as 65532 with a read-only root: healthy, full and delta snapshots, SIGTERM exits 0 after the last delta; then restore', async () => {
    const etcd = await startTestEtcd({ binaries: await etcd35Binaries() });
    cleanups.push(() => etcd.cleanup());
    const client = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(async () => client.close());
    const backups = await volume('backups', NONROOT);
    const data = await volume('data', NONROOT);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const server = containerName('server');
    const started = await podman([
      'run',
      '--detach',
      '--name',
      server,
      '--passwd=false',
      '--read-only',
      '--read-only-tmpfs=false',
      '--network=host',
      '-v',
      `${backups}:/home/nonroot/backups`,
      '-v',
      `${data}:/var/etcd/data`,
      '-e',
      'POD_NAME=etcd-main-0',
      TAG,
      'server',
      `--endpoints=${etcd.clientUrl}`,
      '--storage-provider=Local',
      '--store-container=backups',
      // etcd-druid's paths: scratch space on the data volume, the root file system is read-only.
      '--data-dir=/var/etcd/data/new.etcd',
      '--snapstore-temp-directory=/var/etcd/data/temp',
      '--restoration-temp-snapshots-dir=/var/etcd/data/restoration.temp',
      `--server-port=${port}`,
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1h',
      '--garbage-collection-period=1h',
      '--reelection-period=2s',
    ]);
    expect(started.code, started.stderr).toBe(0);
    const logs = async () => (await podman(['logs', server])).stderr;
    const running = async () => (await podmanOk(['inspect', '--format', '{{.State.Running}}', server])).trim() === 'true';

    const health = await waitFor(
      async () => {
        if (!(await running())) return 'exited';
        const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
        return res.status === 200 ? res.text() : undefined;
      },
      'the server in the container to be healthy',
      60_000,
      200,
    );
    expect(health, await logs()).toBe('{"health":true}');
    const fulls = async () => (await readdir(join(backups, 'v2')).catch(() => [])).filter((f) => f.startsWith('Full-'));
    await waitFor(async () => (await fulls()).length > 0, 'the initial full snapshot in the Local store under /home/nonroot');

    for (let i = 0; i < 10; i++) await client.put(`/registry/a${i}`).value(`v${i}`);
    const full = await fetch(`${url}/snapshot/full`, { method: 'POST' });
    expect(full.status, await logs()).toBe(200);
    expect(((await full.json()) as { kind: string }).kind).toBe('Full');
    for (let i = 0; i < 5; i++) await client.put(`/registry/b${i}`).value(`v${i}`);
    const delta = await fetch(`${url}/snapshot/delta`);
    expect(delta.status, await logs()).toBe(200);
    expect(((await delta.json()) as { kind: string }).kind).toBe('Incr');
    // Only the final flush on SIGTERM can bring these into the store (no delta is due for an hour).
    for (let i = 0; i < 3; i++) await client.put(`/registry/c${i}`).value(`v${i}`);
    const source = await dumpEtcd(etcd.clientUrl);

    await podmanOk(['kill', '--signal', 'TERM', server]);
    const exit = await podman(['wait', server], { timeoutMs: 60_000 });
    expect(exit.stdout.trim(), await logs()).toBe('0');
    expect(await logs()).toMatch(/received SIGTERM: shutting down in order/);

    // restore with the defaults: the temp dir would be in the working directory, on the read-only root.
    const restoreDir = await volume('restore', NONROOT);
    const restore = (extra: string[]) =>
      run([
        ...AS_A_POD,
        '--network=none',
        '-v',
        `${backups}:/home/nonroot/backups`,
        '-v',
        `${restoreDir}:/var/etcd/restore`,
        TAG,
        'restore',
        '--storage-provider=Local',
        '--store-container=backups',
        '--data-dir=/var/etcd/restore/new.etcd',
        '--initial-cluster=default=http://127.0.0.1:2380',
        '--initial-advertise-peer-urls=http://127.0.0.1:2380',
        ...extra,
      ]);
    const refused = await restore([]);
    expect(refused.code).toBe(1);
    expect(lastLine(refused.stderr)).toBe(
      "Error: --restoration-temp-snapshots-dir default.restoration.tmp (/home/nonroot/default.restoration.tmp): cannot create the restoration temp directory: EROFS: read-only file system, mkdir '/home/nonroot/default.restoration.tmp'; give --restoration-temp-snapshots-dir a writable directory (an emptyDir or the data volume)",
    );
    expect(await readdir(restoreDir)).toEqual([]);

    const restored = await restore(['--restoration-temp-snapshots-dir=/var/etcd/restore/restoration.temp']);
    expect(restored.code, restored.stderr).toBe(0);
    const replay = await startLocalEtcd({
      binaries: await etcd35Binaries(),
      dataDir: join(restoreDir, 'new.etcd'),
      name: 'default',
      extraArgs: [...SINGLE_MEMBER_RAFT_ARGS],
    });
    cleanups.push(() => replay.stop());
    expect(await dumpEtcd(replay.clientUrl)).toEqual(source);
  });
});
