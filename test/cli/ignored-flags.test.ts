/**
 * Issue: `restore --help` listed upload-only flags and accepted them silently. Each command now lists the
 * flags it uses; the ones it takes only so that one argument list (etcd-backup-restore registers its whole
 * store group on every command) serves every command are accepted with a warning and named apart in help.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { commandHelp } from '../../src/cli/help.js';
import { flagBindings } from '../../src/config/build.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../../src/config/commands.js';

let home: string;
beforeAll(() => {
  home = mkdtempSync(join(tmpdir(), 'etcdbr-ignored-flags-'));
});
afterAll(() => rmSync(home, { recursive: true, force: true }));

async function run(argv: string[]): Promise<{ code: number; stderr: string; ran: boolean }> {
  let stderr = '';
  let ran = false;
  const io = { stdout: { write: () => undefined }, stderr: { write: (s: string) => (stderr += s) } };
  const runner = async (): Promise<number> => {
    ran = true;
    return 0;
  };
  const runners = Object.fromEntries(COMMAND_NAMES.map((n) => [n, runner]));
  const code = await main(argv, {}, io, { homeDir: home, runners });
  return { code, stderr, ran };
}

describe('flags a command accepts but does not use', () => {
  it('are flags the command defines (so the list cannot name a flag that does not parse)', () => {
    for (const name of COMMAND_NAMES) {
      const known = flagBindings(COMMAND_SPECS[name]);
      for (const flag of Object.keys(COMMAND_SPECS[name].ignoredFlags ?? {})) expect(known.has(flag), `${name} --${flag}`).toBe(true);
    }
  });

  it('the commands that upload nothing ignore the upload flags; the ones that upload use them', () => {
    for (const name of ['restore', 'initialize', 'ls', 'verify'] as const) {
      expect(Object.keys(COMMAND_SPECS[name].ignoredFlags ?? {}).sort(), name).toEqual([
        'encryption-recipients-file',
        'max-parallel-chunk-uploads',
        'min-chunk-size',
      ]);
    }
    for (const name of ['server', 'snapshot', 'compact'] as const) expect(COMMAND_SPECS[name].ignoredFlags, name).toBeUndefined();
    expect(Object.keys(COMMAND_SPECS.copy.ignoredFlags ?? {}).sort()).toEqual([
      'source-max-parallel-chunk-uploads',
      'source-min-chunk-size',
    ]);
  });

  it('restore --help leaves them out of its flag list and names them apart', () => {
    const help = commandHelp(COMMAND_SPECS.restore);
    const [flags, ignored] = help.split('Accepted so that one argument list serves every command');
    expect(ignored).toBeDefined();
    expect(flags).not.toMatch(/--min-chunk-size|--max-parallel-chunk-uploads|--encryption-recipients-file/);
    expect(flags).toMatch(/--encryption-identity-file/);
    expect(ignored!.replace(/\s+/g, ' ')).toContain('--max-parallel-chunk-uploads, --min-chunk-size, --encryption-recipients-file');
    // A command that uploads lists them as usual.
    expect(commandHelp(COMMAND_SPECS.compact)).toMatch(/--min-chunk-size int/);
  });

  it('restore with one of them runs, and warns that it is ignored and why', async () => {
    const r = await run(['restore', '--storage-provider=Local', `--store-container=${home}`, '--min-chunk-size=6000000']);
    expect(r.code).toBe(0);
    expect(r.ran).toBe(true);
    expect(r.stderr).toMatch(/"level":"warn".*--min-chunk-size is ignored by restore: it applies to uploads/);
  });

  it('the same flag on a command that uses it gives no warning', async () => {
    const r = await run(['compact', '--storage-provider=Local', `--store-container=${home}`, '--min-chunk-size=6000000']);
    expect(r.code).toBe(0);
    expect(r.stderr).not.toMatch(/ignored/);
  });

  it('a flag the command does not define at all is still refused', async () => {
    const r = await run(['restore', '--schedule=0 */1 * * *']);
    expect(r.code).not.toBe(0);
    expect(r.ran).toBe(false);
    expect(r.stderr).toMatch(/unknown flag: --schedule/);
  });
});
