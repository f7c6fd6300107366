/**
 * The vocabulary in which flag groups are declared. One declaration per field gives its value type, its
 * flag (name, shorthand, usage) and its config-file key, so flags, help, defaults and the config file
 * cannot drift apart.
 */
import { CodedError } from '../errors.js';

/** Value types, named after pflag's. Durations are milliseconds; every number is a safe integer otherwise. */
export type ValueType = 'string' | 'bool' | 'uint' | 'uint32' | 'int' | 'int64' | 'duration' | 'stringSlice' | 'stringArray';

/** The value types a TypeScript field type may be declared with. */
type TypesFor<V> = V extends boolean
  ? 'bool'
  : V extends number
    ? 'uint' | 'uint32' | 'int' | 'int64' | 'duration'
    : V extends string
      ? 'string'
      : V extends readonly string[]
        ? 'stringSlice' | 'stringArray'
        : never;

export interface FieldDef<V = unknown> {
  type: TypesFor<V>;
  /** Long flag name without dashes; omitted for fields that only the config file sets. */
  flag?: string;
  shorthand?: string;
  usage: string;
  /**
   * Key in the config file when it differs from the field name (upstream's json tags, e.g. `MaxTxnOps`);
   * `false` when the field cannot be set from the config file.
   */
  fileKey?: string | false;
}

export type FieldDefs<T> = { [K in keyof T]-?: FieldDef<T[K]> };

/** Collects validation problems so that one run reports all of them. */
export interface Issues {
  add(message: string): void;
}

export interface GroupDef<T extends object> {
  /** Human name, used in help headings. */
  title: string;
  fields: FieldDefs<T>;
  /** Defaults as the flags declare them (upstream's flag defaults). */
  defaults(): T;
  /**
   * Where upstream's config-file defaults (its struct constructors) differ from its flag defaults.
   * Used as the starting point when `--config-file` is given.
   */
  fileDefaults?: Partial<T>;
  /** Config-file keys upstream has that we accept and ignore (no warning). */
  ignoredFileKeys?: readonly string[];
  /** Normalisations upstream applies before or during validation (path.Clean, limits reset to defaults). */
  complete?(cfg: T, notes: Issues): void;
  /** Adds a message per problem; `flagName(key)` renders the field's flag for messages. */
  validate?(cfg: T, issues: Issues, flagName: (key: keyof T & string) => string): void;
}

export type AnyGroupDef = GroupDef<object>;

/** Helper that keeps each group's literal type while checking it against GroupDef. */
export function defineGroup<T extends object>(group: GroupDef<T>): GroupDef<T> {
  return group;
}

/** Thrown when flags or the config file hold invalid values; `problems` lists each one. */
export class ConfigError extends CodedError {
  readonly code = 'E_INVALID_CONFIG';
  override readonly name = 'ConfigError';
  constructor(readonly problems: readonly string[]) {
    super(problems.length === 1 ? (problems[0] as string) : `invalid configuration:\n  - ${problems.join('\n  - ')}`);
  }
}

export function collectIssues(): Issues & { list: string[] } {
  const list: string[] = [];
  return { list, add: (m) => list.push(m) };
}
