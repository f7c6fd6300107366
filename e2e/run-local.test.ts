/**
 * `npm start` (scripts/run-local.mjs), as a newcomer meets it: the banner names etcd's version, and the
 * command it suggests for listing backups runs on the machine as it is (also on the machine's own,
 * older Node, where bin/etcdbrctl moves to the project's Node).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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

describe('npm start (scripts/run-local.mjs)', () => {
  it('prints the etcd version and a backup-listing command that runs', async () => {
    const dir = await cleanups.tempDir('etcdbr-run-local-');
    const child = spawn(process.execPath, [join(root, 'scripts/run-local.mjs')], {
      cwd: root,
      env: { ...process.env, ETCDBR_LOCAL_DIR: dir, INIT_CWD: root },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((r) => child.once('exit', r));
    cleanups.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
    child.stderr.resume();
    await waitFor(() => out.includes('Ctrl-C stops both'), 'the banner of npm start');

    expect(out).toMatch(/^etcd \d+\.\d+\.\d+ +http:\/\/127\.0\.0\.1:\d+ /m);
    expect(out).not.toContain('=>');
    const hint = /^list backups with: node (\S+) (.*)$/m.exec(out);
    expect(hint).not.toBeNull();
    const r = spawnSync(machineNode(), [hint![1]!, ...hint![2]!.split(' ')], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(r.stderr).not.toMatch(/needs Node|EBADENGINE|Error/);
    expect(r.status).toBe(0);
  });
});
