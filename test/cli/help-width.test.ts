/** `--help` fits a 100-column terminal: long usages wrap under their own column instead of the terminal's edge. */
import { describe, expect, it } from 'vitest';
import { wrapWords } from '../../src/cli/flags.js';
import { commandHelp, rootHelp } from '../../src/cli/help.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../../src/config/commands.js';

const longest = (text: string) => Math.max(...text.split('\n').map((l) => [...l].length));

describe('help width', () => {
  it.each(COMMAND_NAMES)('%s --help has no line over 100 columns', (name) => {
    expect(longest(commandHelp(COMMAND_SPECS[name]))).toBeLessThanOrEqual(100);
  });

  it('the root help has no line over 100 columns', () => {
    expect(longest(rootHelp())).toBeLessThanOrEqual(100);
  });

  it('a wrapped usage continues under its own column and loses no word', () => {
    const help = commandHelp(COMMAND_SPECS.server);
    const lines = help.split('\n');
    const i = lines.findIndex((l) => l.includes('--log-level uint32'));
    const column = lines[i]!.indexOf('verbosity');
    expect(lines[i + 1]!.slice(0, column).trim()).toBe('');
    expect(lines[i + 1]![column]).not.toBe(' ');
    expect(wrapWords('a bb ccc dddd', 6)).toEqual(['a bb', 'ccc', 'dddd']);
  });
});

describe('compact --help', () => {
  it('describes the offline compaction, with etcd only as the fallback (README "How compact works")', () => {
    const help = commandHelp(COMMAND_SPECS.compact);
    expect(help).not.toMatch(/temporary etcd|defragment the embedded etcd/);
    expect(help).toMatch(/^Folds the newest full snapshot .* without an etcd process/s);
    expect(help).toMatch(/--defragment +defragment the local etcd after compaction \(only\s+when compacting through etcd/);
  });
});
