import { describe, expect, it } from 'vitest';
import { FlagError, FlagSet } from '../../src/cli/flags.js';

function flagSet(): FlagSet {
  const fs = new FlagSet();
  fs.add({ name: 'server-port', shorthand: 'p', type: 'uint', usage: 'port', defaultValue: 8080 });
  fs.add({ name: 'max-backups', shorthand: 'm', type: 'uint', usage: 'n', defaultValue: 7 });
  fs.add({ name: 'log-level', type: 'uint32', usage: 'level', defaultValue: 4 });
  fs.add({ name: 'max-backups-to-copy', type: 'int', usage: 'n', defaultValue: -1 });
  fs.add({ name: 'min-chunk-size', type: 'int64', usage: 'bytes', defaultValue: 5242880 });
  fs.add({ name: 'compress-snapshots', type: 'bool', usage: 'compress', defaultValue: true });
  fs.add({ name: 'all', shorthand: 'a', type: 'bool', usage: 'all', defaultValue: false });
  fs.add({ name: 'verbose', shorthand: 'V', type: 'bool', usage: 'v', defaultValue: false });
  fs.add({ name: 'endpoints', shorthand: 'e', type: 'stringSlice', usage: 'eps', defaultValue: ['http://127.0.0.1:2379'] });
  fs.add({ name: 'initial-advertise-peer-urls', type: 'stringArray', usage: 'urls', defaultValue: ['http://localhost:2380'] });
  fs.add({ name: 'etcd-connection-timeout', type: 'duration', usage: 't', defaultValue: 30_000 });
  fs.add({ name: 'schedule', shorthand: 's', type: 'string', usage: 'cron', defaultValue: '0 */1 * * *' });
  fs.add({ name: 'output', shorthand: 'o', type: 'string', usage: 'fmt', defaultValue: 'text' });
  return fs;
}

const parse = (...argv: string[]) => flagSet().parse(argv);
const value = (argv: string[], name: string) => flagSet().parse(argv).changed.get(name);

describe('flag syntax (pflag)', () => {
  it.each<[string[], string, unknown]>([
    [['--server-port=9090'], 'server-port', 9090],
    [['--server-port', '9090'], 'server-port', 9090],
    [['-p', '9090'], 'server-port', 9090],
    [['-p=9090'], 'server-port', 9090],
    [['-p9090'], 'server-port', 9090],
    [['--server-port=0x1F'], 'server-port', 31],
    [['--server-port=0o17'], 'server-port', 15],
    [['--server-port=017'], 'server-port', 15],
    [['--server-port=0b101'], 'server-port', 5],
    [['--server-port=1_000'], 'server-port', 1000],
    [['--max-backups-to-copy=-1'], 'max-backups-to-copy', -1],
    [['--max-backups-to-copy', '-1'], 'max-backups-to-copy', -1],
    [['--min-chunk-size=8589934592'], 'min-chunk-size', 8589934592],
    [['--log-level=4294967295'], 'log-level', 4294967295],
    [['--schedule', '*/5 * * * *'], 'schedule', '*/5 * * * *'],
    [['--schedule='], 'schedule', ''],
    [['-s', '-x'], 'schedule', '-x'],
    [['-o=json'], 'output', 'json'],
    [['-ojson'], 'output', 'json'],
    // pflag quirk: `-o=` is the short form `-oVALUE` with VALUE "=".
    [['-o='], 'output', '='],
  ])('%j sets %s to %j', (argv, name, expected) => {
    expect(value(argv, name)).toEqual(expected);
  });

  it.each<[string[], unknown]>([
    [['--compress-snapshots'], true],
    [['--compress-snapshots=false'], false],
    [['--compress-snapshots=true'], true],
    ...(['1', 't', 'T', 'TRUE', 'true', 'True'] as const).map((v): [string[], unknown] => [[`--compress-snapshots=${v}`], true]),
    ...(['0', 'f', 'F', 'FALSE', 'false', 'False'] as const).map((v): [string[], unknown] => [[`--compress-snapshots=${v}`], false]),
  ])('bool %j', (argv, expected) => {
    expect(value(argv, 'compress-snapshots')).toBe(expected);
  });

  it('takes `--bool false` (space) as the flag plus a positional argument, like pflag', () => {
    const r = parse('--compress-snapshots', 'false');
    expect(r.changed.get('compress-snapshots')).toBe(true);
    expect(r.args).toEqual(['false']);
  });

  it('combines bool shorthands, and a value shorthand after them', () => {
    const r = parse('-aV', '-aojson');
    expect(r.changed.get('all')).toBe(true);
    expect(r.changed.get('verbose')).toBe(true);
    expect(r.changed.get('output')).toBe('json');
  });

  it('splits StringSlice values as CSV and appends repeated flags, replacing the default', () => {
    expect(value(['--endpoints=a,b', '-e', 'c', '--endpoints', '"d,e",f'], 'endpoints')).toEqual(['a', 'b', 'c', 'd,e', 'f']);
    expect(value(['--endpoints=a'], 'endpoints')).toEqual(['a']);
    expect(value(['--endpoints='], 'endpoints')).toEqual([]);
    expect(value(['--endpoints=a,,b'], 'endpoints')).toEqual(['a', '', 'b']);
    expect(value(['--endpoints="say ""hi""",x'], 'endpoints')).toEqual(['say "hi"', 'x']);
  });

  it('repeats StringArray values without splitting', () => {
    expect(value(['--initial-advertise-peer-urls=a,b', '--initial-advertise-peer-urls', 'c'], 'initial-advertise-peer-urls')).toEqual([
      'a,b',
      'c',
    ]);
  });

  it.each<[string, number]>([
    ['300ms', 300],
    ['30s', 30_000],
    ['8m', 480_000],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    ['-1s', -1000],
    ['+2s', 2000],
    ['0', 0],
    ['1us', 0.001],
    ['1µs', 0.001],
    ['1μs', 0.001],
    ['1500ns', 0.0015],
    ['.5s', 500],
    ['1h1m1s1ms', 3_661_001],
  ])('duration %s = %d ms', (text, ms) => {
    expect(value([`--etcd-connection-timeout=${text}`], 'etcd-connection-timeout')).toBeCloseTo(ms, 9);
  });

  it('stops at `--` and keeps positional arguments interspersed', () => {
    const r = parse('a', '--all', 'b', '--', '--server-port=1', '-x');
    expect(r.args).toEqual(['a', 'b', '--server-port=1', '-x']);
    expect(r.argsLenAtDash).toBe(2);
    expect(r.changed.has('server-port')).toBe(false);
  });

  it('treats a lone `-` as positional', () => {
    expect(parse('-').args).toEqual(['-']);
  });

  it('reports help', () => {
    expect(parse('--help').help).toBe(true);
    expect(parse('-h').help).toBe(true);
    expect(parse('--help=false').help).toBe(false);
  });

  it('keeps the last value of a repeated scalar flag', () => {
    expect(value(['-p', '1', '--server-port=2'], 'server-port')).toBe(2);
  });
});

describe('flag errors (pflag messages)', () => {
  it.each<[string[], string]>([
    [['--x'], 'unknown flag: --x'],
    [['--x=1'], 'unknown flag: --x'],
    [['-x'], "unknown shorthand flag: 'x' in -x"],
    [['-ax'], "unknown shorthand flag: 'x' in -x"],
    [['---x'], 'bad flag syntax: ---x'],
    [['--=x'], 'bad flag syntax: --=x'],
    [['--server-port'], 'flag needs an argument: --server-port'],
    [['-p'], "flag needs an argument: 'p' in -p"],
    [['--max-backups=abc'], 'invalid argument "abc" for "-m, --max-backups" flag: strconv.ParseUint: parsing "abc": invalid syntax'],
    [['--max-backups=-1'], 'invalid argument "-1" for "-m, --max-backups" flag: strconv.ParseUint: parsing "-1": invalid syntax'],
    [
      ['--log-level=4294967296'],
      'invalid argument "4294967296" for "--log-level" flag: strconv.ParseUint: parsing "4294967296": value out of range',
    ],
    [
      ['--max-backups-to-copy=1.5'],
      'invalid argument "1.5" for "--max-backups-to-copy" flag: strconv.ParseInt: parsing "1.5": invalid syntax',
    ],
    [['--server-port=1__0'], 'invalid argument "1__0" for "-p, --server-port" flag: strconv.ParseUint: parsing "1__0": invalid syntax'],
    [['--server-port=_1'], 'invalid argument "_1" for "-p, --server-port" flag: strconv.ParseUint: parsing "_1": invalid syntax'],
    [['--server-port=08'], 'invalid argument "08" for "-p, --server-port" flag: strconv.ParseUint: parsing "08": invalid syntax'],
    [
      ['--compress-snapshots=yes'],
      'invalid argument "yes" for "--compress-snapshots" flag: strconv.ParseBool: parsing "yes": invalid syntax',
    ],
    [['--etcd-connection-timeout=30'], 'invalid argument "30" for "--etcd-connection-timeout" flag: time: missing unit in duration "30"'],
    [
      ['--etcd-connection-timeout=1d'],
      'invalid argument "1d" for "--etcd-connection-timeout" flag: time: unknown unit "d" in duration "1d"',
    ],
    [['--etcd-connection-timeout=abc'], 'invalid argument "abc" for "--etcd-connection-timeout" flag: time: invalid duration "abc"'],
    [
      ['--etcd-connection-timeout=1h 30m'],
      'invalid argument "1h 30m" for "--etcd-connection-timeout" flag: time: unknown unit "h " in duration "1h 30m"',
    ],
    [['--etcd-connection-timeout=.s'], 'invalid argument ".s" for "--etcd-connection-timeout" flag: time: invalid duration ".s"'],
    [
      ['--etcd-connection-timeout=9999999999h'],
      'invalid argument "9999999999h" for "--etcd-connection-timeout" flag: time: invalid duration "9999999999h"',
    ],
    [
      ['--endpoints=a"b'],
      'invalid argument "a\\"b" for "-e, --endpoints" flag: parse error on line 1, column 2: bare " in non-quoted-field',
    ],
    [
      ['--endpoints="a'],
      'invalid argument "\\"a" for "-e, --endpoints" flag: parse error on line 1, column 3: extraneous or missing " in quoted-field',
    ],
  ])('%j fails with %s', (argv, message) => {
    expect(() => parse(...argv)).toThrow(FlagError);
    expect(() => parse(...argv)).toThrow(message);
  });

  it('rejects duplicate definitions (a programming error)', () => {
    const fs = flagSet();
    expect(() => fs.add({ name: 'all', type: 'bool', usage: '', defaultValue: false })).toThrow('flag redefined: all');
    expect(() => fs.add({ name: 'other', shorthand: 'p', type: 'bool', usage: '', defaultValue: false })).toThrow(/shorthand/);
  });
});

describe('help text', () => {
  it('lists flags sorted, with type names and non-zero defaults as pflag does', () => {
    // Wide enough for pflag's one line per flag (help-width.test.ts wraps narrower).
    const text = flagSet().usages(undefined, 100);
    const lines = text.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ {2}-a, --all {3,}all$/);
    expect(text).toMatch(/--compress-snapshots\s+compress \(default true\)\n/);
    expect(text).toMatch(/-e, --endpoints strings\s+eps \(default \[http:\/\/127\.0\.0\.1:2379\]\)\n/);
    expect(text).toMatch(/--etcd-connection-timeout duration\s+t \(default 30s\)\n/);
    expect(text).toMatch(/--initial-advertise-peer-urls stringArray\s+urls \(default \[http:\/\/localhost:2380\]\)\n/);
    expect(text).toMatch(/-s, --schedule string\s+cron \(default "0 \*\/1 \* \* \*"\)\n/);
    expect(text).toMatch(/--max-backups-to-copy int\s+n \(default -1\)\n/);
    expect(text).toMatch(/-V, --verbose\s+v\n/);
    // Usage columns line up.
    const cols = lines.map((l) => /^(.*?\S) {3,}(?=\S)/.exec(l)?.[0].length);
    expect(new Set(cols).size).toBe(1);
  });
});
