/**
 * `npm start` (scripts/run-local.mjs), as a newcomer meets it: the banner names etcd's version, and the
 * command it suggests for listing backups runs on the machine as it is (also on the machine's own,
 * older Node, where bin/etcdbrctl moves to the project's Node). A second `npm start` on the same data finds
 * etcd on the same ports, so the member's peer URL still holds.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cleanupAfterEach } from '../test/support/cleanups.js';
import { waitFor } from '../test/support/wait.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const cleanups = cleanupAfterEach();

/** The first Node on PATH outside node_modules (the machine's own), or the one running the tests. */
function machineNode(): string {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir !== '' && !dir.includes('node_modules') && existsSync(join(dir, 'node'))) return join(dir, 'node');
  }
  return process.execPath;
}

/** Starts `npm start`'s script on `dir`; `stop` ends it (SIGTERM: it stops the server and etcd) and waits. */
function runLocal(dir: string, args: string[] = []) {
  const child = spawn(process.execPath, [join(root, 'scripts/run-local.mjs'), ...args], {
    cwd: root,
    env: { ...process.env, ETCDBR_LOCAL_DIR: dir, INIT_CWD: root },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((r) => child.once('exit', r));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  cleanups.push(stop);
  const run = { out: '', err: '', stop };
  child.stdout.setEncoding('utf8').on('data', (s: string) => (run.out += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (run.err += s));
  return run;
}

describe('npm start (scripts/run-local.mjs)', () => {
  it('prints the etcd version and a backup-listing command that runs', async () => {
    const dir = await cleanups.tempDir('etcdbr-run-local-');
    const run = runLocal(dir);
    await waitFor(() => run.out.includes('Ctrl-C stops both'), 'the banner of npm start');
    const out = run.out;

    expect(out).toMatch(/^etcd \d+\.\d+\.\d+ +http:\/\/127\.0\.0\.1:\d+ /m);
    expect(out).not.toContain('=>');
    const hint = /^list backups with: node (\S+) (.*)$/m.exec(out);
    expect(hint).not.toBeNull();
    const r = spawnSync(machineNode(), [hint![1]!, ...hint![2]!.split(' ')], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(r.stderr).not.toMatch(/needs Node|EBADENGINE|Error/);
    expect(r.status).toBe(0);
  });

  it('a second start on the same data keeps the ports: the member keeps its peer URL, no "restart etcd manually"', async () => {
    const dir = await cleanups.tempDir('etcdbr-run-local-ports-');
    // At debug the sidecar says when it found the member's peer URLs as configured.
    const start = async () => {
      const run = runLocal(dir, ['--log-level=5']);
      await waitFor(() => /peer URLs (unchanged|changed)/.test(run.err), 'the sidecar checking the peer URLs');
      return run;
    };
    const etcdUrl = (out: string) => /^etcd \S+ +(http:\/\/\S+) /m.exec(out)?.[1];
    const serverUrl = (out: string) => /^etcdbrctl server +(http:\/\/\S+) /m.exec(out)?.[1];
    const first = await start();
    expect(first.err).toContain('peer URLs unchanged');
    await first.stop();
    const saved = JSON.parse(readFileSync(join(dir, 'ports.json'), 'utf8')) as Record<string, number>;
    expect(etcdUrl(first.out)).toBe(`http://127.0.0.1:${saved.client}`);
    expect(serverUrl(first.out)).toBe(`http://127.0.0.1:${saved.server}`);

    const second = await start();
    expect(etcdUrl(second.out)).toBe(etcdUrl(first.out));
    expect(serverUrl(second.out)).toBe(serverUrl(first.out));
    expect(second.err).toContain('peer URLs unchanged');
    expect(second.err).not.toContain('restart etcd manually');
    await second.stop();
  });
});
