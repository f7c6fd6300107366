/**
 * Builds a subcommand's typed config: defaults, then the config file (server only), then the flags given
 * on the command line, then completion and validation. Pure apart from what the caller passes in.
 */
import { EtcdbrError } from '../errors.js';
import type { CommandSpec, GroupUse } from './commands.js';
import { COMMAND_SPECS } from './commands.js';
import { applyConfigDocument } from './file.js';
import type { FieldDef } from './schema.js';
import { collectIssues, ConfigError } from './schema.js';
import type { CommandConfigs, CommandName } from './types.js';

export interface FlagBinding {
  use: GroupUse;
  /** Field name in the group's config object. */
  key: string;
  field: FieldDef;
  /** The field's default (flag mode), for help. */
  defaultValue: unknown;
}

/** Every flag of a command, by long name. Throws if two groups of one command define the same flag. */
export function flagBindings(spec: CommandSpec): Map<string, FlagBinding> {
  const out = new Map<string, FlagBinding>();
  for (const u of spec.uses) {
    const defaults = u.group.defaults() as Record<string, unknown>;
    for (const [key, field] of Object.entries(u.group.fields) as Array<[string, FieldDef]>) {
      if (field.flag === undefined) continue;
      if (out.has(field.flag)) throw new EtcdbrError('E_INTERNAL', `command ${spec.name}: flag --${field.flag} defined twice`);
      out.set(field.flag, { use: u, key, field, defaultValue: defaults[key] });
    }
  }
  return out;
}

function targetOf(cfg: Record<string, unknown>, path: readonly string[]): Record<string, unknown> {
  let t = cfg;
  for (const seg of path) {
    let next = t[seg];
    if (typeof next !== 'object' || next === null) t[seg] = next = {};
    t = next as Record<string, unknown>;
  }
  return t;
}

function clone<T>(v: T): T {
  return Array.isArray(v) ? ([...v] as T) : v;
}

/** A command's config holding only defaults; `fromFile` starts from upstream's config-file defaults. */
export function defaultCommandConfig<N extends CommandName>(name: N, fromFile = false): CommandConfigs[N] {
  const cfg: Record<string, unknown> = {};
  for (const u of COMMAND_SPECS[name].uses) {
    const t = targetOf(cfg, u.path);
    const d = { ...(u.group.defaults() as Record<string, unknown>), ...(fromFile ? (u.group.fileDefaults ?? {}) : {}) };
    for (const [k, v] of Object.entries(d)) t[k] = clone(v);
  }
  return cfg as unknown as CommandConfigs[N];
}

export interface BuildInput {
  /** Flags given on the command line (FlagSet.parse().changed), by long name. */
  flags: ReadonlyMap<string, unknown>;
  /** Parsed `--config-file` document, when one was given. */
  configDocument?: unknown;
  configFilePath?: string;
}

export interface BuildResult<N extends CommandName> {
  config: CommandConfigs[N];
  /** Informational notes from completion (values reset to defaults), to be logged. */
  notes: string[];
  /** Config-file warnings (unknown keys), to be logged. */
  warnings: string[];
}

/** Throws ConfigError listing every problem found. */
export function buildCommandConfig<N extends CommandName>(name: N, input: BuildInput): BuildResult<N> {
  const spec = COMMAND_SPECS[name] as CommandSpec<N>;
  const bindings = flagBindings(spec as unknown as CommandSpec);
  const withFile = input.configDocument !== undefined;
  const cfg = defaultCommandConfig(name, withFile) as unknown as Record<string, unknown>;
  const warnings: string[] = [];
  const filePath = input.configFilePath ?? '';
  if (withFile) applyConfigDocument(cfg, spec.uses, input.configDocument, filePath, warnings);

  for (const [flag, value] of input.flags) {
    const b = bindings.get(flag);
    if (b === undefined) throw new EtcdbrError('E_INTERNAL', `command ${name}: no binding for flag --${flag}`);
    targetOf(cfg, b.use.path)[b.key] = clone(value);
  }

  const notes = collectIssues();
  const issues = collectIssues();
  const typed = cfg as unknown as CommandConfigs[N];
  for (const u of spec.uses) u.group.complete?.(targetOf(cfg, u.path), notes);
  spec.complete?.(typed, notes);
  for (const u of spec.uses) {
    if (u.validateWhen !== undefined && !u.validateWhen(cfg)) continue;
    const flagName = (key: string): string => describeField(u, key, withFile);
    u.group.validate?.(targetOf(cfg, u.path), issues, flagName);
  }
  spec.validate?.(typed, issues);
  if (issues.list.length > 0) throw new ConfigError(issues.list);
  return { config: typed, notes: notes.list, warnings };
}

/** `--flag`, plus the config-file key when a file is in use; the file key for file-only fields. */
export function describeField(u: GroupUse, key: string, withFile: boolean): string {
  const field = (u.group.fields as Record<string, FieldDef | undefined>)[key];
  const fileKey = field?.fileKey === false ? undefined : (field?.fileKey ?? key);
  const filePath = [...(u.filePath ?? u.path), ...(fileKey === undefined ? [] : [fileKey])].join('.');
  if (field?.flag === undefined) return filePath;
  if (withFile && fileKey !== undefined) return `--${field.flag} (config file: ${filePath})`;
  return `--${field.flag}`;
}
