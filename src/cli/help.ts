/**
 * Flag sets and help texts, laid out like cobra's so `--help` looks familiar to upstream users.
 */
import { flagBindings } from '../config/build.js';
import type { CommandSpec } from '../config/commands.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../config/commands.js';
import { FLAG_USE } from './flag-use.js';
import { FlagSet, HELP_WIDTH, wrapWords } from './flags.js';

export const ROOT_DESCRIPTION = 'Command line utility for etcd backup restore';

/**
 * The flag set of a subcommand, built from its groups (the single source of the flags), without the flags
 * of ours it does not use (flag-use.ts); the ignored ones stay, so that they parse.
 */
export function commandFlagSet(spec: CommandSpec): FlagSet {
  const fs = new FlagSet(`help for ${spec.name}`);
  const refused = new Set(FLAG_USE[spec.name].refused);
  for (const [name, b] of flagBindings(spec)) {
    if (refused.has(name)) continue;
    const flag = { name, type: b.field.type, usage: b.field.usage, defaultValue: b.defaultValue };
    fs.add(b.field.shorthand === undefined ? flag : { ...flag, shorthand: b.field.shorthand });
  }
  return fs;
}

export function rootFlagSet(): FlagSet {
  const fs = new FlagSet('help for etcdbrctl');
  fs.add({ name: 'version', shorthand: 'v', type: 'bool', usage: 'print version info', defaultValue: false });
  return fs;
}

/** The root help, wrapped to `columns` (helpWidth: the terminal's, else 80). */
export function rootHelp(columns = HELP_WIDTH): string {
  const width = Math.max('help'.length, ...COMMAND_NAMES.map((n) => n.length)) + 3;
  const rows = [...COMMAND_NAMES.map((n) => [n, COMMAND_SPECS[n].short] as const), ['help', 'Help about any command'] as const].sort(
    ([a], [b]) => (a < b ? -1 : 1),
  );
  return [
    ...ROOT_DESCRIPTION.split('\n').flatMap((line) => wrapWords(line, columns)),
    '',
    'Usage:',
    '  etcdbrctl [flags]',
    '  etcdbrctl [command]',
    '',
    'Available Commands:',
    ...rows.map(([n, s]) => `  ${n.padEnd(width)}${wrapWords(s, columns - 2 - width).join(`\n${' '.repeat(2 + width)}`)}`),
    '',
    'Flags:',
    rootFlagSet().usages(undefined, columns).trimEnd(),
    '',
    ...wrapWords('Use "etcdbrctl [command] --help" for more information about a command.', columns),
    '',
  ].join('\n');
}

/** A command's help, wrapped to `columns` (helpWidth: the terminal's, else 80). */
export function commandHelp(spec: CommandSpec, columns = HELP_WIDTH): string {
  const paragraphs = (text: string): string[] => text.split('\n').flatMap((line) => wrapWords(line, columns));
  const extra = spec.configFile
    ? ['', ...paragraphs('With --config-file, the file is applied first and flags given on the command line override it.')]
    : [];
  return [...paragraphs(spec.long), ...extra, '', 'Usage:', `  etcdbrctl ${spec.name} [flags]`, '', ...groupedUsages(spec, columns)].join(
    '\n',
  );
}

/**
 * The flags by concern (the groups they are defined in: etcd connection, store, snapshots, …) rather than
 * one alphabetical list: the server alone has more than 70. Each section is pflag's layout.
 */
function groupedUsages(spec: CommandSpec, columns: number): string[] {
  const fs = commandFlagSet(spec);
  const { ignored, refused } = FLAG_USE[spec.name];
  const unlisted = new Set([...ignored, ...refused]);
  const sections = new Map<string, Set<string>>();
  for (const [name, b] of flagBindings(spec)) {
    if (unlisted.has(name)) continue;
    const title = b.use.group.title;
    if (!sections.has(title)) sections.set(title, new Set());
    sections.get(title)!.add(name);
  }
  const out = ['Flags:', fs.usages(new Set(['help']), columns).trimEnd(), ''];
  for (const [title, names] of sections) out.push(...wrapWords(`Flags (${title}):`, columns), fs.usages(names, columns).trimEnd(), '');
  if (ignored.length > 0) {
    // Named, not described: they do nothing here, and a description would suggest otherwise.
    const names = [...ignored].sort().map((n) => `--${n}`);
    out.push(
      ...wrapWords(`Accepted for compatibility with etcd-backup-restore, ignored by ${spec.name}:`, columns),
      ...wrapWords(names.join(', ').split(' '), columns - 2).map((l) => `  ${l}`),
      '',
    );
  }
  return out;
}
