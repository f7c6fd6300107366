/**
 * Each command lists and accepts the flags it uses; a flag the Go tool accepts for the command but this one
 * ignores parses, with a log line naming it; a flag of ours the command does not use is refused. Argument
 * lists written for the Go tool (etcd-druid's, the deploy example's, the docs') parse without either.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { flagBindings } from '../../src/config/build.js';
import { COMMAND_NAMES, COMMAND_SPECS, isCommandName } from '../../src/config/commands.js';
import type { CommandName } from '../../src/config/types.js';
import { FLAG_USE } from '../../src/cli/flag-use.js';
import { commandFlagSet, commandHelp } from '../../src/cli/help.js';
import { main } from '../../src/cli/main.js';
import type { MainOptions } from '../../src/cli/main.js';

const ROOT = join(import.meta.dirname, '..', '..');

let home: string;
beforeAll(() => {
  home = mkdtempSync(join(tmpdir(), 'etcdbr-flag-use-'));
});
afterAll(() => rmSync(home, { recursive: true, force: true }));

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
  /** The config the command would have run with, when it got that far. */
  config: unknown;
}

/** Runs `argv` in-process up to the command, which is replaced by one that records its config. */
async function run(argv: string[]): Promise<Ran> {
  let stdout = '';
  let stderr = '';
  let config: unknown;
  const record = async (c: unknown): Promise<number> => {
    config = c;
    return 0;
  };
  const runners = Object.fromEntries(COMMAND_NAMES.map((n) => [n, record])) as MainOptions['runners'];
  const io = { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } };
  const code = await main(argv, {}, io, { homeDir: home, runners: runners! });
  return { code, stdout, stderr, config };
}

/** The JSON log lines of a run at `level`. */
function logLines(stderr: string, level: string): Array<{ msg: string }> {
  return stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: string | number; msg: string })
    .filter((l) => l.level === level);
}

/** The flag names a help text lists in its flag tables (not in the compatibility note). */
function listedFlags(help: string): Set<string> {
  const tables = help.split(/^Accepted for compatibility/m)[0]!;
  return new Set([...tables.matchAll(/^\s+(?:-\w, )?--([a-z0-9-]+)/gm)].map((m) => m[1]!));
}

const LOCAL = (dir: string) => ['--storage-provider=Local', `--store-container=${dir}`];

describe('flag use per command', () => {
  it('names only flags the command defines, each once', () => {
    for (const name of COMMAND_NAMES) {
      const defined = flagBindings(COMMAND_SPECS[name]);
      const { ignored, refused } = FLAG_USE[name];
      for (const f of [...ignored, ...refused]) expect(defined.has(f), `${name}: --${f}`).toBe(true);
      expect(new Set([...ignored, ...refused]).size, name).toBe(ignored.length + refused.length);
    }
  });

  it('restore --help lists neither the upload tuning nor the recipients file, and names the ignored flags apart', async () => {
    const r = await run(['restore', '--help']);
    expect(r.code).toBe(0);
    const listed = listedFlags(r.stdout);
    for (const f of ['max-parallel-chunk-uploads', 'min-chunk-size', 'encryption-recipients-file', 'auto-compaction-mode']) {
      expect(listed.has(f), `--${f}`).toBe(false);
    }
    for (const f of ['data-dir', 'storage-provider', 'encryption-identity-file', 'max-fetchers'])
      expect(listed.has(f), `--${f}`).toBe(true);
    const note = r.stdout.split(/^Accepted for compatibility with etcd-backup-restore, ignored by restore:$/m)[1];
    expect(note).toBeDefined();
    expect(note).toContain('--min-chunk-size');
    expect(note).not.toContain('--encryption-recipients-file');
    for (const line of r.stdout.split('\n')) expect(line.length, line).toBeLessThanOrEqual(100);
  });

  it.each(COMMAND_NAMES.map((n) => [n] as const))('%s --help lists exactly the flags it uses', (name) => {
    const { ignored, refused } = FLAG_USE[name];
    const expected = [...flagBindings(COMMAND_SPECS[name]).keys()].filter((f) => !ignored.includes(f) && !refused.includes(f));
    expect([...listedFlags(commandHelp(COMMAND_SPECS[name]))].sort()).toEqual(['help', ...expected].sort());
  });

  it('an ignored flag is accepted with a warning naming it and the command', async () => {
    const r = await run(['restore', ...LOCAL(home), '--min-chunk-size=6291456', '--max-parallel-chunk-uploads=3']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.config).toBeDefined();
    expect(logLines(r.stderr, 'warn').map((l) => l.msg)).toEqual([
      '--min-chunk-size, --max-parallel-chunk-uploads are ignored by restore (accepted for compatibility with etcd-backup-restore)',
    ]);
  });

  it('an ignored flag still gets the Go tool’s value check', async () => {
    const r = await run(['restore', ...LOCAL(home), '--auto-compaction-mode=hourly']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/--auto-compaction-mode: unknown mode "hourly"/);
  });

  it('on server (etcd-druid passes the auto-compaction flags to every sidecar) the line is info, not a warning', async () => {
    const r = await run(['server', '--auto-compaction-mode=periodic', '--auto-compaction-retention=30m']);
    expect(r.code, r.stderr).toBe(0);
    expect(logLines(r.stderr, 'warn')).toEqual([]);
    expect(logLines(r.stderr, 'info').map((l) => l.msg)).toContain(
      '--auto-compaction-mode, --auto-compaction-retention are ignored by server (accepted for compatibility with etcd-backup-restore)',
    );
  });

  it.each([
    ['restore', 'encryption-recipients-file'],
    ['initialize', 'encryption-recipients-file'],
    ['snapshot', 'encryption-identity-file'],
    ['verify', 'min-chunk-size'],
    ['ls', 'encryption-identity-file'],
  ] as const)('%s refuses --%s, a flag of ours it does not use', async (name, flag) => {
    const r = await run([name, ...LOCAL(home), `--${flag}=x`]);
    expect(r.code).toBe(1);
    expect(r.config).toBeUndefined();
    expect(r.stderr).toBe(`Error: unknown flag: --${flag} (${name} does not use it)\nRun 'etcdbrctl ${name} --help' for usage.\n`);
  });

  it('a flag no command has is refused as before', async () => {
    const r = await run(['restore', '--no-such-flag']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("Error: unknown flag: --no-such-flag\nRun 'etcdbrctl restore --help' for usage.\n");
  });
});

/** Flags given in an argument list, by long name, through the command's own parser. */
function parsedFlags(name: CommandName, args: readonly string[]): string[] {
  return [...commandFlagSet(COMMAND_SPECS[name]).parse(args).changed.keys()];
}

describe('argument lists written for the Go tool parse without error or warning', () => {
  /** etcd-druid's compaction job (internal/controller/compaction/reconciler.go, with every optional flag). */
  const DRUID_COMPACT = [
    '--data-dir=/var/etcd/data/compaction.etcd',
    '--restoration-temp-snapshots-dir=/var/etcd/data/compaction.restoration.temp',
    '--snapstore-temp-directory=/var/etcd/data/tmp',
    '--metrics-scrape-wait-duration=1m0s',
    '--enable-snapshot-lease-renewal=true',
    '--full-snapshot-lease-name=etcd-main-full-snap',
    '--delta-snapshot-lease-name=etcd-main-delta-snap',
    '--embedded-etcd-quota-bytes=8589934592',
    '--etcd-defrag-timeout=15m0s',
    '--etcd-snapshot-timeout=15m0s',
    '--storage-provider=S3',
    '--store-prefix=etcd-main',
    '--store-container=my-bucket',
    '--store-endpoint-override=https://s3.example.com',
  ];

  it('etcd-druid’s compaction job', () => {
    expect(parsedFlags('compact', DRUID_COMPACT)).toHaveLength(DRUID_COMPACT.length);
    expect(parsedFlags('compact', DRUID_COMPACT).filter((f) => FLAG_USE.compact.ignored.includes(f))).toEqual([]);
  });

  it('the deploy example’s sidecar: only the auto-compaction flags etcd-druid always passes are ignored (at info level)', () => {
    const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy', 'example', '06-statefulset.yaml'), 'utf8'));
    const lists: string[][] = [];
    for (const doc of docs) {
      for (const c of (doc.toJS() as { spec?: { template?: { spec?: { containers?: Array<{ args?: string[] }> } } } }).spec?.template?.spec
        ?.containers ?? []) {
        if (c.args !== undefined && isCommandName(c.args[0] ?? '')) lists.push(c.args);
      }
    }
    expect(lists.map((l) => l[0])).toEqual(['server']);
    const given = parsedFlags('server', lists[0]!.slice(1));
    expect(given.filter((f) => FLAG_USE.server.ignored.includes(f)).sort()).toEqual(['auto-compaction-mode', 'auto-compaction-retention']);
  });

  it('every complete command line in README.md and docs/', () => {
    const files = [
      join(ROOT, 'README.md'),
      ...readdirSync(join(ROOT, 'docs'))
        .filter((f) => f.endsWith('.md'))
        .map((f) => join(ROOT, 'docs', f)),
    ];
    const lines = files.flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .map((l) => l.replace(/^.*?\betcdbrctl /, 'etcdbrctl ').replace(/`.*$/, ''))
        .filter((l) => /^etcdbrctl [a-z]+ --/.test(l) && !/\.\.\.|…|[<[]/.test(l))
        .map((l) => [file, l] as const),
    );
    expect(lines.length).toBeGreaterThanOrEqual(4);
    for (const [file, line] of lines) {
      const [, name, ...args] = line.trim().split(/\s+/);
      expect(isCommandName(name!), `${file}: ${line}`).toBe(true);
      const given = parsedFlags(name as CommandName, args);
      expect(
        given.filter((f) => FLAG_USE[name as CommandName].ignored.includes(f)),
        `${file}: ${line}`,
      ).toEqual([]);
    }
  });
});
