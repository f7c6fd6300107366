/**
 * Reading credential files the way etcd-backup-restore does: JSON files, directories of one file per key,
 * Go's JSON key matching and boolean parsing, and modification times for rotation detection. Shared by
 * the per-provider credential readers; every error is an E_CREDENTIALS SnapStoreError that names the
 * variable and the file.
 */
import type { Stats } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { SnapStoreError } from './errors.js';

export type CredentialEnv = Readonly<Record<string, string | undefined>>;

export function fail(message: string, cause?: unknown): SnapStoreError {
  return new SnapStoreError('E_CREDENTIALS', message, cause === undefined ? undefined : { cause });
}

/** An empty variable counts as unset (upstream would try to read the file "" and fail). */
export function lookup(env: CredentialEnv, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? undefined : v;
}

export function errnoText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'ENOENT') return 'no such file or directory';
  if (e.code === 'EACCES') return 'permission denied';
  if (e.code === 'EISDIR') return 'is a directory';
  if (e.code === 'ENOTDIR') return 'not a directory';
  return e.code ?? String(err);
}

export async function readText(envVar: string, path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw fail(`${envVar}: cannot read credential file ${path}: ${errnoText(err)}`, err);
  }
}

export async function readJsonObject(envVar: string, path: string): Promise<Record<string, unknown>> {
  const text = await readText(envVar, path);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw fail(`${envVar}: credential file ${path} is not valid JSON: ${(err as Error).message}`, err);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw fail(`${envVar}: credential file ${path} must hold a JSON object`);
  }
  return value as Record<string, unknown>;
}

/** Go encoding/json key matching: exact, else case-insensitive. */
export function pick(obj: Record<string, unknown>, key: string): unknown {
  if (Object.hasOwn(obj, key)) return obj[key];
  const lower = key.toLowerCase();
  const k = Object.keys(obj).find((x) => x.toLowerCase() === lower);
  return k === undefined ? undefined : obj[k];
}

export function jsonString(envVar: string, path: string, obj: Record<string, unknown>, key: string): string | undefined {
  const v = pick(obj, key);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw fail(`${envVar}: credential file ${path}: "${key}" must be a string`);
  return v;
}

export function jsonBool(envVar: string, path: string, obj: Record<string, unknown>, key: string): boolean | undefined {
  const v = pick(obj, key);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw fail(`${envVar}: credential file ${path}: "${key}" must be true or false`);
  return v;
}

/** `strconv.ParseBool`. */
export function parseBool(envVar: string, path: string, text: string): boolean {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(text)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(text)) return false;
  throw fail(`${envVar}: credential file ${path} must hold true or false, got ${JSON.stringify(text)}`);
}

export async function statOrUndefined(path: string): Promise<Stats | undefined> {
  try {
    return await stat(path);
  } catch {
    return undefined;
  }
}

/**
 * The first `*.json` file in the directory by name (symlinks followed, as Kubernetes secret volumes use
 * them), or undefined. A missing directory is an error.
 */
export async function findJsonInDir(envVar: string, dir: string): Promise<string | undefined> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    throw fail(`${envVar}: cannot read credential directory ${dir}: ${errnoText(err)}`, err);
  }
  for (const name of names.filter((n) => n.endsWith('.json')).sort()) {
    const st = await statOrUndefined(join(dir, name));
    if (st?.isFile() === true) return join(dir, name);
  }
  return undefined;
}

/** Reads those of `keys` that exist as files in `dir`, trimmed unless listed in `raw`. */
export async function readDirValues(
  envVar: string,
  dir: string,
  keys: readonly string[],
  raw: readonly string[] = [],
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const key of keys) {
    const path = join(dir, key);
    const st = await statOrUndefined(path);
    if (st === undefined) continue;
    const text = await readText(envVar, path);
    out.set(key, raw.includes(key) ? text : text.trim());
  }
  return out;
}

export async function maxMtime(envVar: string, files: readonly string[]): Promise<Date> {
  let max = 0;
  for (const f of files) {
    let st: Stats;
    try {
      st = await stat(f);
    } catch (err) {
      throw fail(`${envVar}: cannot stat credential file ${f}: ${errnoText(err)}`, err);
    }
    max = Math.max(max, st.mtimeMs);
  }
  return new Date(max);
}

export async function allExist(files: readonly string[]): Promise<boolean> {
  for (const f of files) if ((await statOrUndefined(f)) === undefined) return false;
  return true;
}

/** Where credential fields come from, for messages: a JSON file, or a directory of one file per key. */
export interface CredentialSource {
  kind: 'json' | 'dir';
  path: string;
}

/** A located credential source and the variable that pointed at it (named first in every message). */
export interface CredentialLocation extends CredentialSource {
  envVar: string;
}

/**
 * Upstream's lookup order for file credentials: `jsonVar` names a JSON file; else `dirVar` names a
 * directory whose first `*.json` file is used, or, without one, its one-file-per-key contents. Undefined
 * when neither variable is set (each provider says what to set, or falls back to its environment).
 */
export async function locateCredentials(env: CredentialEnv, jsonVar: string, dirVar: string): Promise<CredentialLocation | undefined> {
  const jsonFile = lookup(env, jsonVar);
  if (jsonFile !== undefined) return { envVar: jsonVar, kind: 'json', path: jsonFile };
  const dir = lookup(env, dirVar);
  if (dir === undefined) return undefined;
  const inDir = await findJsonInDir(dirVar, dir);
  if (inDir !== undefined) return { envVar: dirVar, kind: 'json', path: inDir };
  return { envVar: dirVar, kind: 'dir', path: dir };
}

/** `credential file <path>` or `credential directory <path>`. */
export function sourceText(source: CredentialSource): string {
  return source.kind === 'json' ? `credential file ${source.path}` : `credential directory ${source.path}`;
}

/** How a missing field is named: its JSON key, or the file in the directory it should be in. */
export function missingText(source: CredentialSource, key: string): string {
  return source.kind === 'json' ? `"${key}" is missing` : `${key} is missing (file ${join(source.path, key)})`;
}

/** Throws one E_CREDENTIALS error naming every one of `required` that is absent or empty, each with its file. */
export function requireFields(
  envVar: string,
  provider: string,
  source: CredentialSource,
  fields: Readonly<Partial<Record<string, string>>>,
  required: readonly string[],
): void {
  const absent = required.filter((k) => (fields[k] ?? '') === '');
  if (absent.length > 0) {
    throw fail(`${envVar}: ${provider} ${sourceText(source)}: ${absent.map((k) => missingText(source, k)).join(', ')}`);
  }
}

export interface CredentialFields<S extends string, B extends string> {
  strings: Partial<Record<S, string>>;
  bools: Partial<Record<B, boolean>>;
}

/**
 * Reads the string and boolean fields of a located source: JSON keys (Go's matching, types checked) or
 * the files of a directory (trimmed; booleans in `strconv.ParseBool` form). `checkedOnly` are JSON keys
 * that are accepted and type-checked but not used.
 */
export async function readCredentialFields<S extends string, B extends string = never>(
  loc: CredentialLocation,
  keys: { strings: readonly S[]; bools?: readonly B[]; checkedOnly?: readonly string[] },
): Promise<CredentialFields<S, B>> {
  const { envVar, path } = loc;
  const bools = keys.bools ?? [];
  const out: CredentialFields<S, B> = { strings: {}, bools: {} };
  if (loc.kind === 'json') {
    const obj = await readJsonObject(envVar, path);
    for (const k of keys.strings) {
      const v = jsonString(envVar, path, obj, k);
      if (v !== undefined) out.strings[k] = v;
    }
    for (const k of bools) {
      const v = jsonBool(envVar, path, obj, k);
      if (v !== undefined) out.bools[k] = v;
    }
    for (const k of keys.checkedOnly ?? []) jsonString(envVar, path, obj, k);
    return out;
  }
  const values = await readDirValues(envVar, path, [...keys.strings, ...bools]);
  for (const k of keys.strings) {
    const v = values.get(k);
    if (v !== undefined) out.strings[k] = v;
  }
  for (const k of bools) {
    const v = values.get(k);
    if (v !== undefined) out.bools[k] = parseBool(envVar, join(path, k), v);
  }
  return out;
}

/** Modification time of a located source: the JSON file, or the given files of the directory. */
export async function locationModifiedTime(loc: CredentialLocation, dirFiles: readonly string[]): Promise<Date> {
  return maxMtime(loc.envVar, loc.kind === 'json' ? [loc.path] : dirFiles.map((k) => join(loc.path, k)));
}
