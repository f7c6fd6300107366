/**
 * A small flag parser that accepts exactly what spf13/pflag (cobra's parser) accepts, so argument lists
 * written for the Go etcdbrctl (for example by etcd-druid) parse the same way here:
 *
 * - `--flag=value`, `--flag value`; `-p 8080`, `-p=8080`, `-p8080`; combined bool shorthands `-ab`;
 * - bool flags as `--flag` or `--flag=false`; `--flag false` leaves `false` as a positional argument;
 * - StringSlice: comma-separated (CSV quoting) and repeatable; StringArray: repeatable, no splitting;
 *   the first occurrence replaces the default, later ones append;
 * - integers with Go's base prefixes and range checks; durations in Go syntax;
 * - `--` ends flag parsing; flags and positional arguments may be interleaved.
 *
 * Error messages are pflag's (`unknown flag: --x`, `invalid argument "abc" for "-m, --max-backups" flag: ...`).
 */
import { CodedError, EtcdbrError } from '../errors.js';
import type { ValueType } from '../config/schema.js';
import {
  formatGoDuration,
  formatStringList,
  parseCsvRecord,
  parseGoBool,
  parseGoDuration,
  parseGoInt,
  parseGoUint,
  ValueError,
} from '../config/values.js';

export interface FlagSpec {
  /** Long name without dashes. */
  name: string;
  /** One character, without the dash. */
  shorthand?: string;
  type: ValueType;
  usage: string;
  /** Typed default, shown in help and the starting value of slices. */
  defaultValue: unknown;
}

/** A command-line problem: unknown flag, bad value, missing argument. Exit code 1, like cobra. */
export class FlagError extends CodedError {
  readonly code = 'E_INVALID_FLAG';
  override readonly name = 'FlagError';
  /** For `unknown flag: --x`: the long name given (x), so a caller can say more about it. */
  unknownFlag?: string;
}

export interface ParseResult {
  /** Typed values of the flags given on the command line, by long name, in order of first appearance. */
  changed: Map<string, unknown>;
  /** Positional arguments (including everything after `--`). */
  args: string[];
  /** Number of positional arguments before `--`, or -1 when there was no `--`. */
  argsLenAtDash: number;
  /** `-h`/`--help` was given (and not set to false). */
  help: boolean;
}

const HELP: FlagSpec = { name: 'help', shorthand: 'h', type: 'bool', usage: 'help', defaultValue: false };

/** Converts one textual value to the flag's type, or throws ValueError with Go's message. */
export function convertValue(type: ValueType, value: string): unknown {
  switch (type) {
    case 'string':
      return value;
    case 'bool':
      return parseGoBool(value);
    case 'uint':
      return parseGoUint(value, 64);
    case 'uint32':
      return parseGoUint(value, 32);
    case 'int':
    case 'int64':
      return parseGoInt(value);
    case 'duration':
      return parseGoDuration(value);
    case 'stringSlice':
      return parseCsvRecord(value);
    case 'stringArray':
      return [value];
  }
}

export class FlagSet {
  private readonly byName = new Map<string, FlagSpec>();
  private readonly byShorthand = new Map<string, FlagSpec>();

  /** `helpUsage` becomes the usage text of the implicit `-h, --help` flag. */
  constructor(helpUsage = 'help') {
    this.add({ ...HELP, usage: helpUsage });
  }

  /** Registers a flag; a duplicate name or shorthand is a programming error. */
  add(spec: FlagSpec): void {
    if (this.byName.has(spec.name)) throw new EtcdbrError('E_INTERNAL', `flag redefined: ${spec.name}`);
    if (spec.shorthand !== undefined) {
      if (spec.shorthand.length !== 1)
        throw new EtcdbrError('E_INTERNAL', `shorthand ${JSON.stringify(spec.shorthand)} of --${spec.name} is not one character`);
      const other = this.byShorthand.get(spec.shorthand);
      if (other !== undefined) {
        throw new EtcdbrError(
          'E_INTERNAL',
          `unable to redefine ${JSON.stringify(spec.shorthand)} shorthand of --${spec.name}: used by --${other.name}`,
        );
      }
      this.byShorthand.set(spec.shorthand, spec);
    }
    this.byName.set(spec.name, spec);
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  flags(): FlagSpec[] {
    return [...this.byName.values()];
  }

  parse(argv: readonly string[]): ParseResult {
    const changed = new Map<string, unknown>();
    const positional: string[] = [];
    let argsLenAtDash = -1;
    const set = (flag: FlagSpec, value: string): void => {
      let v: unknown;
      try {
        v = convertValue(flag.type, value);
      } catch (err) {
        const detail = err instanceof ValueError ? err.message : String(err);
        const shown = flag.shorthand !== undefined ? `-${flag.shorthand}, --${flag.name}` : `--${flag.name}`;
        throw new FlagError(`invalid argument ${JSON.stringify(value)} for ${JSON.stringify(shown)} flag: ${detail}`);
      }
      const prev = changed.get(flag.name);
      if ((flag.type === 'stringSlice' || flag.type === 'stringArray') && Array.isArray(prev)) {
        changed.set(flag.name, [...(prev as string[]), ...(v as string[])]);
      } else {
        changed.set(flag.name, v);
      }
    };

    const args = [...argv];
    while (args.length > 0) {
      const s = args.shift() as string;
      if (s.length < 2 || s[0] !== '-') {
        positional.push(s);
        continue;
      }
      if (s[1] === '-') {
        if (s.length === 2) {
          argsLenAtDash = positional.length;
          positional.push(...args);
          break;
        }
        this.parseLong(s, args, set);
      } else {
        let shorthands = s.slice(1);
        while (shorthands.length > 0) shorthands = this.parseShort(shorthands, args, set);
      }
    }
    const help = changed.get('help') === true;
    changed.delete('help');
    return { changed, args: positional, argsLenAtDash, help };
  }

  private parseLong(s: string, args: string[], set: (f: FlagSpec, v: string) => void): void {
    const body = s.slice(2);
    if (body === '' || body[0] === '-' || body[0] === '=') throw new FlagError(`bad flag syntax: ${s}`);
    const eq = body.indexOf('=');
    const name = eq >= 0 ? body.slice(0, eq) : body;
    const flag = this.byName.get(name);
    if (flag === undefined) {
      const err = new FlagError(`unknown flag: --${name}`);
      err.unknownFlag = name;
      throw err;
    }
    if (eq >= 0) set(flag, body.slice(eq + 1));
    else if (flag.type === 'bool') set(flag, 'true');
    else if (args.length > 0) set(flag, args.shift() as string);
    else throw new FlagError(`flag needs an argument: ${s}`);
  }

  /** Consumes one shorthand from `shorthands` and returns the rest (pflag's parseSingleShortArg). */
  private parseShort(shorthands: string, args: string[], set: (f: FlagSpec, v: string) => void): string {
    const c = shorthands[0] as string;
    const flag = this.byShorthand.get(c);
    if (flag === undefined) throw new FlagError(`unknown shorthand flag: '${c}' in -${shorthands}`);
    if (shorthands.length > 2 && shorthands[1] === '=') {
      set(flag, shorthands.slice(2));
      return '';
    }
    if (flag.type === 'bool') {
      set(flag, 'true');
      return shorthands.slice(1);
    }
    if (shorthands.length > 1) {
      set(flag, shorthands.slice(1));
      return '';
    }
    if (args.length > 0) {
      set(flag, args.shift() as string);
      return '';
    }
    throw new FlagError(`flag needs an argument: '${c}' in -${shorthands}`);
  }

  /**
   * pflag's `FlagUsages`: one line per flag, sorted by name, usage aligned, non-zero defaults shown, wrapped
   * to `width` columns. `only`: just these flags (a section of a grouped help).
   */
  usages(only?: ReadonlySet<string>, width = HELP_WIDTH): string {
    const lines: Array<[string, string[]]> = [];
    const sorted = [...this.byName.values()]
      .filter((f) => only === undefined || only.has(f.name))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const f of sorted) {
      let left = f.shorthand !== undefined ? `  -${f.shorthand}, --${f.name}` : `      --${f.name}`;
      const varname = TYPE_NAMES[f.type];
      if (varname !== '') left += ` ${varname}`;
      const def = formatDefault(f);
      // The default stays one unit: "(default" at a line's end and its value on the next reads badly.
      lines.push([left, def === undefined ? f.usage.split(' ') : [...f.usage.split(' '), `(default ${def})`]]);
    }
    const column = Math.max(0, ...lines.map(([l]) => l.length));
    // Wrapped to `width` columns, continuation lines under the usage column: a terminal would otherwise
    // wrap a long usage at its own edge into the flag names' column.
    const indent = ' '.repeat(column + 3);
    const usageWidth = width - indent.length;
    // A unit kept whole (a default) that does not fit its column is broken into its words after all.
    const words = (u: readonly string[], w: number): string[] => u.flatMap((unit) => (unit.length > w ? unit.split(' ') : [unit]));
    const fits = lines.every(([, u]) => words(u, usageWidth).every((word) => word.length <= usageWidth));
    if (usageWidth >= MIN_USAGE_WIDTH && fits) {
      return lines.map(([l, u]) => `${l.padEnd(column)}   ${wrapWords(words(u, usageWidth), usageWidth).join(`\n${indent}`)}\n`).join('');
    }
    // Flag names too long for a usage column beside them at this width (a narrow terminal, the leader
    // election's 57-column flag): every usage of the section goes under its flag instead.
    const under = ' '.repeat(STACKED_INDENT);
    const stackedWidth = width - STACKED_INDENT;
    return lines
      .map(
        ([l, u]) =>
          `${l}\n${wrapWords(words(u, stackedWidth), stackedWidth)
            .map((w) => under + w)
            .join('\n')}\n`,
      )
      .join('');
  }
}

/** Columns `--help` fills when the terminal's width is not known (pflag does not wrap at all). */
export const HELP_WIDTH = 80;
/** The narrowest and widest help: below 40 columns nothing reads well; above 100 lines get hard to follow. */
export const MIN_HELP_WIDTH = 40;
export const MAX_HELP_WIDTH = 100;
const MIN_USAGE_WIDTH = 30;
/** Where a usage starts under its flag when the section's flag names leave no room beside them. */
const STACKED_INDENT = 10;

/**
 * The width `--help` wraps at: the terminal's, between MIN_HELP_WIDTH and MAX_HELP_WIDTH, when the output is
 * one; else a valid `COLUMNS` from the environment; else HELP_WIDTH (80, the width of a pager or a file).
 */
export function helpWidth(out: { isTTY?: boolean; columns?: number }, env: Readonly<Record<string, string | undefined>>): number {
  const fromEnv = Number(env['COLUMNS']);
  const columns =
    out.isTTY === true && (out.columns ?? 0) > 0 ? out.columns! : Number.isInteger(fromEnv) && fromEnv > 0 ? fromEnv : HELP_WIDTH;
  return Math.min(MAX_HELP_WIDTH, Math.max(MIN_HELP_WIDTH, columns));
}

/**
 * `text` (or its words) in lines of at most `width` characters, broken between words; a longer word gets a
 * line of its own.
 */
export function wrapWords(text: string | readonly string[], width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of typeof text === 'string' ? text.split(' ') : text) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  lines.push(line);
  return lines;
}

const TYPE_NAMES: Readonly<Record<ValueType, string>> = {
  string: 'string',
  bool: '',
  uint: 'uint',
  uint32: 'uint32',
  int: 'int',
  int64: 'int64',
  duration: 'duration',
  stringSlice: 'strings',
  stringArray: 'stringArray',
};

/** The default as pflag prints it, or undefined for zero values (which pflag omits). */
export function formatDefault(f: Pick<FlagSpec, 'type' | 'defaultValue'>): string | undefined {
  const v = f.defaultValue;
  switch (f.type) {
    case 'string':
      return v === '' || v === undefined ? undefined : JSON.stringify(v);
    case 'bool':
      return v === true ? 'true' : undefined;
    case 'duration':
      return v === 0 || v === undefined ? undefined : formatGoDuration(v as number);
    case 'stringSlice':
    case 'stringArray':
      return Array.isArray(v) && v.length > 0 ? formatStringList(v as string[]) : undefined;
    default:
      return v === 0 || v === undefined ? undefined : String(v);
  }
}
