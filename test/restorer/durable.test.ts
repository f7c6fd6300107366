/**
 * A restored data dir is made durable before it replaces anything: every file and directory under it is
 * fsynced. Observed from outside with strace (the system calls, not our bookkeeping), on the compiled module.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { syncTree } from '../../src/restorer/durable.js';

const execFileAsync = promisify(execFile);
const DURABLE = fileURLToPath(new URL('../../dist/restorer/durable.js', import.meta.url));

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'etcdbr-durable-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** The paths a process fsynced, read from strace's log (`fsync(3</path>) = 0` with -y). */
async function fsyncedBy(script: string): Promise<string[]> {
  const log = join(root, 'strace.log');
  await execFileAsync('strace', ['-f', '-qq', '-y', '-e', 'trace=fsync', '-o', log, process.execPath, '--input-type=module', '-e', script]);
  return readFileSync(log, 'utf8')
    .split('\n')
    .flatMap((l) => {
      const m = /fsync\(\d+<([^>]+)>\) = 0/.exec(l);
      return m ? [m[1]!] : [];
    });
}

describe('syncTree', () => {
  it('fsyncs every file and directory of a data dir, the dir itself last', async () => {
    const data = join(root, 'data');
    mkdirSync(join(data, 'member', 'snap'), { recursive: true });
    mkdirSync(join(data, 'member', 'wal'), { recursive: true });
    writeFileSync(join(data, 'member', 'snap', 'db'), 'backend');
    writeFileSync(join(data, 'member', 'snap', '0000000000000001-0000000000000001.snap'), 'snap');
    writeFileSync(join(data, 'member', 'wal', '0000000000000000-0000000000000000.wal'), 'wal');
    const synced = await fsyncedBy(
      `const { syncTree } = await import(${JSON.stringify(DURABLE)}); await syncTree(${JSON.stringify(data)});`,
    );
    expect(new Set(synced)).toEqual(
      new Set([
        join(data, 'member', 'snap', 'db'),
        join(data, 'member', 'snap', '0000000000000001-0000000000000001.snap'),
        join(data, 'member', 'snap'),
        join(data, 'member', 'wal', '0000000000000000-0000000000000000.wal'),
        join(data, 'member', 'wal'),
        join(data, 'member'),
        data,
      ]),
    );
    expect(synced.at(-1)).toBe(data);
  });

  it('rejects for a data dir that is not there', async () => {
    await expect(syncTree(join(root, 'missing'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
