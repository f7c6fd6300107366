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
