import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CommandContext } from '../../src/config/context.js';
import { main } from '../../src/cli/main.js';
import type { MainOptions } from '../../src/cli/main.js';
import type { ServerConfig } from '../../src/config/types.js';

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** `$HOME` of the commands run here: this file's own, so that a default store never lands in a shared dir. */
let home: string;
beforeAll(() => {
  home = mkdtempSync(join(tmpdir(), 'etcdbr-main-home-'));
});
afterAll(() => rmSync(home, { recursive: true, force: true }));

async function run(argv: string[], env: Record<string, string> = {}, options: MainOptions = {}): Promise<Result> {
  let stdout = '';
  let stderr = '';
  const io = { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } };
  const code = await main(argv, env, io, { homeDir: home, ...options });
  return { code, stdout, stderr };
}

describe('root command', () => {
  it.each([['--version'], ['-v']])('%s prints version information', async (flag) => {
    const r = await run([flag], { ETCDBRCTL_GIT_SHA: 'abc123' });
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')).toEqual([
      `etcdbrctl Version: ${VERSION}`,
      'Git SHA: abc123',
      `Node Version: ${process.version}`,
      `OS/Arch: ${process.platform}/${process.arch}`,
      '',
    ]);
  });

  it('prints help without arguments, for --help and for `help`', async () => {
    for (const argv of [[], ['--help'], ['-h'], ['help']]) {
      const r = await run(argv);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('Usage:\n  etcdbrctl [flags]\n  etcdbrctl [command]');
      for (const c of ['server', 'snapshot', 'restore', 'initialize', 'compact', 'copy', 'ls', 'help']) {
        expect(r.stdout).toMatch(new RegExp(`^  ${c} +\\S`, 'm'));
      }
      expect(r.stdout).toMatch(/-v, --version\s+print version info/);
    }
  });

  it('has no version subcommand, like upstream', async () => {
    const r = await run(['version']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('Error: unknown command "version" for "etcdbrctl"\nRun \'etcdbrctl --help\' for usage.\n');
  });

  it('rejects unknown root flags', async () => {
    const r = await run(['--bogus']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('Error: unknown flag: --bogus');
  });

  it('finds the command after root flags as cobra does, then parses them as the command’s', async () => {
    const r = await run(['-v', 'snapshot']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("unknown shorthand flag: 'v' in -v");
  });

  it('answers help for a command and for unknown topics', async () => {
    const r = await run(['help', 'restore']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('etcdbrctl restore [flags]');
    const u = await run(['help', 'nope']);
    expect(u.code).toBe(1);
    expect(u.stderr).toContain('Unknown help topic "nope"');
  });
});

describe('subcommands', () => {
  it('`snapshot --bogus` fails with pflag’s message and exit code 1', async () => {
    const r = await run(['snapshot', '--bogus']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe("Error: unknown flag: --bogus\nRun 'etcdbrctl snapshot --help' for usage.\n");
  });

  it('names the flag and the bad value', async () => {
    const r = await run(['server', '--max-backups=abc']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'Error: invalid argument "abc" for "-m, --max-backups" flag: strconv.ParseUint: parsing "abc": invalid syntax',
    );
  });

  it('reports validation problems with exit code 1', async () => {
    const r = await run(['server', '--garbage-collection-policy=LimitBased', '--max-backups=0']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('Error: --max-backups must be greater than 0 with the LimitBased garbage collection policy\n');
  });

  it('refuses a stray positional argument, with a hint for `--bool false`', async () => {
    const r = await run(['server', '--compress-snapshots', 'false']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('unexpected argument "false" for "etcdbrctl server"');
    expect(r.stderr).toContain("takes its value with '='");
  });

  it('compact without a store uses upstream’s default Local store and, finding no full snapshot, exits 0', async () => {
    const home = mkdtempSync(join(tmpdir(), 'etcdbr-compact-home-'));
    try {
      const r = await run(['compact'], {}, { homeDir: home });
      expect(r.code).toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain('No base snapshot found. Will do nothing.');
      expect(r.stderr).not.toContain('not implemented');
      // As upstream's Local store: `$HOME/default.bkp/v2` is created, and it stays empty.
      expect(readdirSync(join(home, 'default.bkp', 'v2'))).toEqual([]);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('copy validates its stores first; with no source named it copies nothing (upstream would read $HOME/default.bkp)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-copy-'));
    // Upstream's default Local source, `$HOME/default.bkp`, exists in this test's own home: still not used.
    const home = join(dir, 'home');
    mkdirSync(join(home, 'default.bkp'), { recursive: true });
    try {
      for (const args of [[], ['--source-store-prefix=etcd-main']]) {
        const none = await run(['copy', '--storage-provider=Local', `--store-container=${dir}`, ...args], {}, { homeDir: home });
        expect(none.code).toBe(1);
        expect(none.stdout).toBe('');
        expect(none.stderr).toContain(
          'Error: no source store given: set --source-store-container (or the environment variable SOURCE_STORAGE_CONTAINER)',
        );
      }
      // SOURCE_STORAGE_CONTAINER names a source as upstream reads it (a relative Local one under $HOME).
      const fromEnv = await run(
        ['copy', '--storage-provider=Local', `--store-container=${dir}`],
        { SOURCE_STORAGE_CONTAINER: 'default.bkp' },
        { homeDir: home },
      );
      expect(fromEnv.code).toBe(0);
      expect(fromEnv.stdout).toBe(
        `Copied 0 snapshot(s), 0 bytes; 0 already present; no snapshots in Local store ${join(home, 'default.bkp', 'v2')}` +
          ' (check --source-storage-provider, --source-store-container and --source-store-prefix)\n',
      );
      expect(fromEnv.stderr).toContain('No source backups found: no snapshots in Local store');
      const missing = await run([
        'copy',
        '--storage-provider=Local',
        `--store-container=${dir}`,
        `--source-store-container=${join(dir, 'nobody')}`,
      ]);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain(
        `local store directory ${join(dir, 'nobody')} does not exist: check --source-store-container (and $HOME for a relative one)`,
      );
      const r = await run(['copy', '--storage-provider=Local', `--store-container=${dir}`, '--source-storage-provider=S3']);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        'storage container name not specified: set --source-store-container or the environment variable SOURCE_STORAGE_CONTAINER',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('fails before running when store credentials are missing', async () => {
    const r = await run(['snapshot', '--storage-provider=ABS', '--store-container=c']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^Error: unable to get credentials/);
  });

  it('prints a command’s help with every flag, its type and default', async () => {
    const r = await run(['server', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('etcdbrctl server [flags]');
    expect(r.stdout).toMatch(/-p, --server-port uint\s+port on which the HTTP server listens\s+\(default 8080\)/);
    expect(r.stdout).toMatch(/--etcd-snapshot-timeout duration\s+[\s\S]*?\(default 15m0s\)/);
    expect(r.stdout).toMatch(/--insecure-skip-tls-verify\s+[\s\S]*?\(default true\)/);
    expect(r.stdout).toMatch(/--log-level uint32\s+[\s\S]*?\(default 4\)/);
    expect(r.stdout).toMatch(/--secondary-store-container string/);
    // Grouped by concern, each flag once.
    expect(r.stdout).toMatch(/Flags \(HTTP server\):\n(.*\n)*?.*--server-port/);
    expect(r.stdout).toMatch(/Flags \(snapstore\):\n(.*\n)*?.*--storage-provider/);
    expect(r.stdout.match(/--delta-snapshot-period /g)).toHaveLength(1);
    const c = await run(['compact', '-h']);
    expect(c.stdout).toMatch(/--etcd-snapshot-timeout duration\s+[\s\S]*?\(default 30m0s\)/);
  });

  it('passes the typed config to the implementation; file first, then command-line flags', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-main-'));
    const file = join(dir, 'config.yaml');
    writeFileSync(file, 'snapshotterConfig:\n  maxBackups: 3\n  schedule: "*/10 * * * *"\nserverConfig:\n  port: 9000\nbogusKey: 1\n');
    let seen: ServerConfig | undefined;
    let ctxSeen: CommandContext | undefined;
    const r = await run(
      ['server', `--config-file=${file}`, '--server-port=9100', '--log-level=5'],
      {},
      {
        runners: {
          server: async (config, ctx) => {
            seen = config;
            ctxSeen = ctx;
            return 0;
          },
        },
      },
    );
    expect(r.code).toBe(0);
    expect(seen?.configFile).toBe(file);
    expect(seen?.snapshotterConfig.maxBackups).toBe(3);
    expect(seen?.snapshotterConfig.schedule).toBe('*/10 * * * *');
    expect(seen?.serverConfig.port).toBe(9100);
    expect(seen?.logLevel).toBe(5);
    expect(ctxSeen?.stores).toEqual({});
    expect(ctxSeen?.logger.level).toBe('debug');
    // The unknown key is logged as a JSON warning on stderr.
    const line = JSON.parse(r.stderr.trim().split('\n')[0] as string) as { level: string; msg: string };
    expect(line).toMatchObject({ level: 'warn', msg: `config file ${file}: unknown key bogusKey ignored` });
  });

  it('fails clearly when the config file is missing', async () => {
    const r = await run(['server', '--config-file=/nonexistent/c.yaml']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('Error: --config-file: cannot read /nonexistent/c.yaml: ENOENT\n');
  });

  it('resolves stores into the context and can resolve them again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-main-'));
    let ctxSeen: CommandContext | undefined;
    const r = await run(
      ['restore', '--storage-provider=Local', `--store-container=${dir}`, '--store-prefix=etcd'],
      {},
      {
        runners: {
          restore: async (_config, ctx) => {
            ctxSeen = ctx;
            return 0;
          },
        },
      },
    );
    expect(r.code).toBe(0);
    expect(ctxSeen?.stores.primary).toMatchObject({ provider: 'Local', rootDir: dir, prefix: 'etcd/v2' });
    expect(await ctxSeen?.resolveStore('primary')).toEqual(ctxSeen?.stores.primary);
    expect(await ctxSeen?.resolveStore('source')).toBeUndefined();
  });

  it('turns an exception in a command into exit code 1 and a message', async () => {
    const r = await run(
      ['initialize'],
      {},
      {
        runners: {
          initialize: async () => {
            throw new Error('boom');
          },
        },
      },
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('Error: boom\n');
  });

  it('logs completion notes at info level, honouring --log-level', async () => {
    const info = await run(['snapshot', '--delta-snapshot-memory-limit=0']);
    expect(info.stderr).toMatch(/"level":"info".*memory limit/);
    const quiet = await run(['snapshot', '--delta-snapshot-memory-limit=0', '--log-level=3']);
    expect(quiet.stderr).not.toMatch(/memory limit/);
  });
});
