/**
 * The server config file (`--config-file`, upstream `pkg/server/types.go`): YAML with upstream's json-tag keys.
 *
 * Like Go's encoding/json behind sigs.k8s.io/yaml, keys match exactly or else case-insensitively, unknown
 * keys are ignored (we warn), `null` leaves a value as it is, and a value of the wrong type is an error.
 * Durations are Go duration strings, or numbers of nanoseconds (upstream's `wrappers.Duration`).
 */
import { readFile } from 'node:fs/promises';
import { yaml, type YamlLibrary } from '../encoding/yaml.js';
import type { GroupUse } from './commands.js';
import type { FieldDef } from './schema.js';
import { ConfigError } from './schema.js';
import { parseGoDuration, ValueError } from './values.js';

/** Reads and parses the file; a missing file or YAML syntax error is a ConfigError naming the file. */
export async function readConfigFile(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError([`--config-file: cannot read ${path}: ${code ?? String(err)}`]);
  }
  return parseConfigText(text, path, await yaml());
}

/** Parses a config file's text with the yaml library (`yaml()`, loaded by the caller). */
export function parseConfigText(text: string, path: string, library: YamlLibrary): unknown {
  const doc = library.parseDocument(text, { prettyErrors: false });
  if (doc.errors.length > 0) {
    throw new ConfigError(doc.errors.map((e) => `--config-file ${path}: invalid YAML: ${e.message}`));
  }
  return doc.toJS() as unknown;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Go encoding/json's key matching: exact first, then case-insensitive. */
function findKey(obj: Record<string, unknown>, key: string): string | undefined {
  if (Object.hasOwn(obj, key)) return key;
  const lower = key.toLowerCase();
  return Object.keys(obj).find((k) => k.toLowerCase() === lower);
}

function fileKeyOf(name: string, field: FieldDef): string | undefined {
  if (field.fileKey === false) return undefined;
  return field.fileKey ?? name;
}

/** Converts one file value to the field's type; throws a message on a type mismatch. */
function convertFileValue(field: FieldDef, value: unknown): unknown {
  const kind = Array.isArray(value) ? 'list' : value === null ? 'null' : typeof value;
  const expected = (what: string): string => `expected ${what}, got ${kind} ${JSON.stringify(value)}`;
  switch (field.type) {
    case 'string':
      if (typeof value !== 'string') throw new ValueError(expected('a string'));
      return value;
    case 'bool':
      if (typeof value !== 'boolean') throw new ValueError(expected('true or false'));
      return value;
    case 'uint':
    case 'uint32':
    case 'int':
    case 'int64': {
      if (typeof value !== 'number' || !Number.isInteger(value)) throw new ValueError(expected('an integer'));
      const unsigned = field.type === 'uint' || field.type === 'uint32';
      if (unsigned && value < 0) throw new ValueError(`expected an unsigned integer, got ${value}`);
      const max = field.type === 'uint32' ? 0xffff_ffff : Number.MAX_SAFE_INTEGER;
      if (Math.abs(value) > max) throw new ValueError(`value ${value} out of range`);
      return value;
    }
    case 'duration':
      if (typeof value === 'number' && Number.isFinite(value)) return value / 1e6;
      if (typeof value !== 'string') throw new ValueError(expected('a duration such as "30s"'));
      try {
        return parseGoDuration(value);
      } catch (err) {
        throw err instanceof ValueError ? err : new ValueError(String(err));
      }
    case 'stringSlice':
    case 'stringArray':
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw new ValueError(expected('a list of strings'));
      return [...(value as string[])];
  }
}

/**
 * Applies a parsed config document onto `cfg` (already holding the defaults). Problems are collected and
 * thrown together as one ConfigError; unknown keys become warnings.
 */
export function applyConfigDocument(
  cfg: Record<string, unknown>,
  uses: readonly GroupUse[],
  doc: unknown,
  path: string,
  warnings: string[],
): void {
  if (doc === null || doc === undefined) return;
  if (!isRecord(doc)) throw new ConfigError([`--config-file ${path}: the document must be a mapping of sections`]);
  const problems: string[] = [];
  // Keys that some group (or a nested section) consumes, per section path, for unknown-key warnings.
  const known = new Map<string, Set<string>>();
  const knownAt = (p: readonly string[]): Set<string> => {
    const k = p.join('.');
    let s = known.get(k);
    if (s === undefined) known.set(k, (s = new Set()));
    return s;
  };
  // The document itself first, so that warnings list top-level keys before nested ones.
  const sections = new Map<string, Record<string, unknown>>([['', doc]]);

  for (const u of uses) {
    const filePath = u.filePath ?? u.path;
    // Walk to the section, matching keys like encoding/json does.
    let section: unknown = doc;
    const actual: string[] = [];
    for (let i = 0; i < filePath.length; i++) {
      const seg = filePath[i] as string;
      knownAt(filePath.slice(0, i)).add(seg.toLowerCase());
      if (!isRecord(section)) {
        section = undefined;
        break;
      }
      const k = findKey(section, seg);
      section = k === undefined ? undefined : section[k];
      actual.push(k ?? seg);
    }
    if (section === undefined || section === null) continue;
    const where = actual.join('.');
    if (!isRecord(section)) {
      problems.push(`--config-file ${path}: ${where} must be a mapping`);
      continue;
    }
    sections.set(filePath.join('.'), section);
    let target: Record<string, unknown> = cfg;
    for (const seg of u.path) target = target[seg] as Record<string, unknown>;
    for (const [name, field] of Object.entries(u.group.fields) as Array<[string, FieldDef]>) {
      const fileKey = fileKeyOf(name, field);
      if (fileKey === undefined) continue;
      knownAt(filePath).add(fileKey.toLowerCase());
      const k = findKey(section, fileKey);
      if (k === undefined) continue;
      const value = section[k];
      if (value === null || value === undefined) continue;
      try {
        target[name] = convertFileValue(field, value);
      } catch (err) {
        problems.push(`--config-file ${path}: ${where === '' ? '' : where + '.'}${k}: ${(err as Error).message}`);
      }
    }
    for (const ignored of u.group.ignoredFileKeys ?? []) knownAt(filePath).add(ignored.toLowerCase());
  }

  for (const [p, section] of sections) {
    const k = known.get(p) ?? new Set<string>();
    for (const key of Object.keys(section)) {
      if (!k.has(key.toLowerCase())) warnings.push(`config file ${path}: unknown key ${p === '' ? key : `${p}.${key}`} ignored`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
}
