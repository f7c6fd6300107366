/**
 * `--snapstore-temp-directory` pointed at a busy directory (issue 39): one that also holds the etcd config,
 * the Local store, the data dir's parent and the sidecar's home files. Initialization, by `server` on
 * `/initialization/start` and by `initialize`, removes the upload parts a killed process left there and
 * nothing else: the etcd config, the store, the home files and a running writer's parts stay. Upstream
 * removes every entry of the directory; so did we.
 */
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupAfterEach, type Cleanups } from '../test/support/cleanups.js';
import { runCli } from './support/cli-process.js';
import { localStoreFlags, startSidecar, waitFor } from './support/sidecar.js';

const cleanups = cleanupAfterEach();

/** A process of the test's own, named as a part's writer would be (pid, start ticks, boot); killed after the test. */
async function startWriter(c: Cleanups): Promise<{ tag: string; kill(): Promise<void> }> {
  const child = spawn('sleep', ['1000'], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const kill = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  c.push(kill);
  const stat = await readFile(`/proc/${child.pid}/stat`, 'utf8');
  const boot = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).replaceAll('-', '').slice(0, 8);
  return { tag: `${child.pid}.${stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]}.${boot}`, kill };
}

interface BusyDir {
  dir: string;
  etcdConf: string;
  store: string;
  dataDir: string;
  /** What initialization must leave, by name: everything but the killed writer's parts. */
  kept: string[];
}

/** A temp dir that holds what the did, plus parts of a killed and of a running writer. */
async function busyTempDir(c: Cleanups): Promise<BusyDir> {
  const dir = await c.tempDir('etcdbr-e2e-tempdir-');
  const etcdConf = join(dir, 'etcd.conf.yaml');
  await writeFile(etcdConf, 'name: etcd-main-0\n');
  const store = join(dir, 'store');
  await mkdir(store);
  await writeFile(join(dir, '.bashrc'), '# the home of the wrapper\n');
  await mkdir(join(dir, 'var'));
  const killed = await startWriter(c);
  const running = await startWriter(c);
  await writeFile(join(dir, `.etcdbr-part-${killed.tag}-0123456789ab-1`), 'part');
  await writeFile(join(dir, `.etcdbr-part-${killed.tag}-0123456789ab-2`), 'part');
  const live = `.etcdbr-part-${running.tag}-ba9876543210-1`;
  await writeFile(join(dir, live), 'part');
  await killed.kill();
  return { dir, etcdConf, store, dataDir: join(dir, 'var', 'new.etcd'), kept: ['.bashrc', 'etcd.conf.yaml', live, 'store', 'var'] };
}

const env = (b: BusyDir) => ({ ETCD_CONF: b.etcdConf, POD_NAME: 'etcd-main-0', POD_NAMESPACE: 'shoot--a--b' });

describe('the snapstore temp directory at initialization', () => {
  // `/tmp/` with a slash emptied all of /tmp: the same directory, spelled with one, is treated the same.
  it.each([
    ['as given', ''],
    ['with a trailing slash', '/'],
  ])('initialize removes only the parts a killed process left (temp dir %s)', async (_, slash) => {
    const b = await busyTempDir(cleanups);
    const r = await runCli(
      ['initialize', ...localStoreFlags(b.store, `${b.dir}${slash}`), `--data-dir=${b.dataDir}`, '--log-level=4'],
      env(b),
      [],
    );
    expect(r.code, r.stderr).toBe(0);
    expect((await readdir(b.dir)).sort()).toEqual(b.kept.sort());
    expect(await readFile(b.etcdConf, 'utf8')).toBe('name: etcd-main-0\n');
    expect(r.stderr).toContain('removed upload parts that stopped processes left in the snapstore temp directory');
  });

  it('server, on /initialization/start, removes only the parts a killed process left', async () => {
    const b = await busyTempDir(cleanups);
    const sidecar = await startSidecar(
      [...localStoreFlags(b.store, b.dir), `--data-dir=${b.dataDir}`, '--endpoints=http://127.0.0.1:1', '--schedule=0 0 1 1 *'],
      env(b),
    );
    cleanups.push(() => sidecar.stop('SIGKILL'));
    expect((await fetch(`${sidecar.url}/initialization/start?mode=sanity`)).status).toBe(200);
    const status = await waitFor(async () => {
      const s = await (await fetch(`${sidecar.url}/initialization/status`)).text();
      return s === 'Successful' || s === 'Failed' ? s : undefined;
    }, 'initialization to finish');
    expect(status, sidecar.logs()).toBe('Successful');
    expect((await readdir(b.dir)).sort()).toEqual(b.kept.sort());
  });
});
