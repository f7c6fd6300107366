/**
 * `--help` wraps at the terminal's width (40 to 100 columns), else at 80: long usages wrap under their own
 * column instead of at the terminal's edge, sections whose flag names leave no room put usages under the flag,
 * and descriptions wrap as paragraphs.
 */
import { describe, expect, it } from 'vitest';
import { helpWidth, wrapWords } from '../../src/cli/flags.js';
import { commandHelp, rootHelp } from '../../src/cli/help.js';
import { main } from '../../src/cli/main.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../../src/config/commands.js';

const lines = (text: string) => text.split('\n');
const columns = (line: string) => [...line].length;
const longest = (text: string) => Math.max(...lines(text).map(columns));
const helps = (width: number) => [rootHelp(width), ...COMMAND_NAMES.map((name) => commandHelp(COMMAND_SPECS[name], width))];

describe('help width', () => {
  it.each([60, 80, 100])('every help has no line over %i columns', (width) => {
    for (const help of helps(width)) expect(longest(help)).toBeLessThanOrEqual(width);
  });

  it('at 40 columns only what cannot be broken passes the edge: a flag name, one word', () => {
    for (const help of helps(40)) {
      for (const line of lines(help).filter((l) => columns(l) > 40)) expect(line).toMatch(/^ {6}--[a-z-]+( [a-zA-Z]+)?$|^ +\S+$/);
    }
  });

  it('the default width is 80', () => {
    expect(longest(commandHelp(COMMAND_SPECS.server))).toBe(80);
    expect(commandHelp(COMMAND_SPECS.server)).toBe(commandHelp(COMMAND_SPECS.server, 80));
  });

  it("is the terminal's width within 40 to 100 columns; else COLUMNS; else 80", () => {
    expect(helpWidth({ isTTY: true, columns: 72 }, {})).toBe(72);
    expect(helpWidth({ isTTY: true, columns: 200 }, {})).toBe(100);
    expect(helpWidth({ isTTY: true, columns: 20 }, {})).toBe(40);
    expect(helpWidth({ isTTY: true, columns: 72 }, { COLUMNS: '90' })).toBe(72);
    expect(helpWidth({}, { COLUMNS: '90' })).toBe(90);
    expect(helpWidth({}, { COLUMNS: 'wide' })).toBe(80);
    expect(helpWidth({ columns: 120 }, {})).toBe(80);
  });

  it('etcdbrctl <command> --help and etcdbrctl help <command> wrap at the terminal they write to', async () => {
    for (const argv of [['restore', '--help'], ['help', 'restore'], ['--help']]) {
      let out = '';
      const stdout = { isTTY: true, columns: 64, write: (s: string) => (out += s) };
      expect(await main(argv, {}, { stdout, stderr: { write: () => true } })).toBe(0);
      expect(longest(out)).toBeLessThanOrEqual(64);
      expect(longest(out)).toBeGreaterThan(56);
    }
  });

  it('a wrapped usage continues under its own column and loses no word', () => {
    const help = commandHelp(COMMAND_SPECS.server);
    const all = lines(help);
    const i = all.findIndex((l) => l.includes('--log-level uint32'));
    const column = all[i]!.indexOf('verbosity');
    expect(all[i + 1]!.slice(0, column).trim()).toBe('');
    expect(all[i + 1]![column]).not.toBe(' ');
    expect(wrapWords('a bb ccc dddd', 6)).toEqual(['a bb', 'ccc', 'dddd']);
  });

  it('a section whose flag names leave too little room puts each usage under its flag', () => {
    const all = lines(commandHelp(COMMAND_SPECS.server, 80));
    const i = all.findIndex((l) => l.includes('--etcd-connection-timeout-leader-election'));
    expect(all[i]).toBe('      --etcd-connection-timeout-leader-election duration');
    expect(all[i + 1]).toBe('          etcd client timeout while checking leadership (default 5s)');
  });

  it('a description is wrapped as paragraphs: every line a command describes itself with ends a sentence', () => {
    for (const name of COMMAND_NAMES) for (const paragraph of COMMAND_SPECS[name].long.split('\n')) expect(paragraph).toMatch(/\.$/);
    // The server's description runs on where the source broke it before ("…is the leader" alone on a line).
    expect(commandHelp(COMMAND_SPECS.server, 100).split('\n\n')[0]).not.toMatch(/leader\n/);
  });
});

describe('compact --help', () => {
  it('describes the offline compaction, with etcd only as the fallback (docs/how-it-works.md "How `compact` works")', () => {
    const help = commandHelp(COMMAND_SPECS.compact).replaceAll(/\s+/g, ' ');
    expect(help).not.toMatch(/temporary etcd|defragment the embedded etcd/);
    expect(help).toMatch(/^Folds the newest full snapshot .* without an etcd process/s);
    expect(help).toMatch(/--defragment defragment the local etcd after compaction \(only when compacting through etcd/);
  });
});
