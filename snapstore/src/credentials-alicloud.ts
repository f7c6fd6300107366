/**
 * Alibaba Cloud OSS credentials (upstream-reference.md §3.6): `<P>ALICLOUD_APPLICATION_CREDENTIALS_JSON`
 * (a JSON file) or `<P>ALICLOUD_APPLICATION_CREDENTIALS` (a directory: its first `*.json` file, or one
 * file per key). `storageEndpoint`, `accessKeyID` and `accessKeySecret` are required (upstream checks the
 * directory form only; a JSON file without them could only fail later, so both forms are checked here);
 * `bucketName` is accepted and ignored (`--store-container` names the bucket).
 */
import { join } from 'node:path';
import type { OssCredentials } from './config.js';
import { fail, findJsonInDir, jsonString, lookup, maxMtime, readDirValues, readJsonObject } from './credential-files.js';
import type { CredentialEnv } from './credential-files.js';

export const OSS_BASE = 'ALICLOUD_APPLICATION_CREDENTIALS';

const REQUIRED = ['storageEndpoint', 'accessKeyID', 'accessKeySecret'] as const;
type OssKey = (typeof REQUIRED)[number];

/** Checks the fields of one file or directory (pure); each missing one is named with its file. */
export function ossCredentialsFromFields(
  envVar: string,
  source: { kind: 'json' | 'dir'; path: string },
  f: Partial<Record<OssKey, string>>,
): OssCredentials {
  const absent = REQUIRED.filter((k) => (f[k] ?? '') === '');
  if (absent.length > 0) {
    const what = source.kind === 'json' ? `credential file ${source.path}` : `credential directory ${source.path}`;
    const missing = absent.map((k) => (source.kind === 'json' ? `"${k}" is missing` : `${k} is missing (file ${join(source.path, k)})`));
    throw fail(`${envVar}: OSS ${what}: ${missing.join(', ')}`);
  }
  return {
    storageEndpoint: f.storageEndpoint as string,
    accessKeyID: f.accessKeyID as string,
    accessKeySecret: f.accessKeySecret as string,
  };
}

async function fromJsonFile(envVar: string, path: string): Promise<OssCredentials> {
  const obj = await readJsonObject(envVar, path);
  const f: Partial<Record<OssKey, string>> = {};
  for (const k of REQUIRED) {
    const v = jsonString(envVar, path, obj, k);
    if (v !== undefined) f[k] = v;
  }
  jsonString(envVar, path, obj, 'bucketName'); // type-checked, not used
  return ossCredentialsFromFields(envVar, { kind: 'json', path }, f);
}

/** OSS credentials; an error when neither variable is set (upstream: `unable to get credentials`). */
export async function readOssCredentials(env: CredentialEnv, prefix: string): Promise<OssCredentials> {
  const jsonVar = `${prefix}${OSS_BASE}_JSON`;
  const dirVar = `${prefix}${OSS_BASE}`;
  const jsonFile = lookup(env, jsonVar);
  if (jsonFile !== undefined) return fromJsonFile(jsonVar, jsonFile);
  const dir = lookup(env, dirVar);
  if (dir === undefined) throw fail(`unable to get credentials: set ${jsonVar} (a JSON file) or ${dirVar} (a directory) for the OSS store`);
  const inDir = await findJsonInDir(dirVar, dir);
  if (inDir !== undefined) return fromJsonFile(dirVar, inDir);
  const values = await readDirValues(dirVar, dir, REQUIRED);
  return ossCredentialsFromFields(dirVar, { kind: 'dir', path: dir }, Object.fromEntries(values));
}

/** Upstream `GetOSSCredentialsLastModifiedTime`: the JSON file, or `accessKeyID, accessKeySecret, storageEndpoint`. */
export async function ossCredentialsModifiedTime(env: CredentialEnv, prefix: string): Promise<Date | undefined> {
  const jsonVar = `${prefix}${OSS_BASE}_JSON`;
  const dirVar = `${prefix}${OSS_BASE}`;
  const jsonFile = lookup(env, jsonVar);
  if (jsonFile !== undefined) return maxMtime(jsonVar, [jsonFile]);
  const dir = lookup(env, dirVar);
  if (dir === undefined) return undefined;
  const inDir = await findJsonInDir(dirVar, dir);
  if (inDir !== undefined) return maxMtime(dirVar, [inDir]);
  return maxMtime(
    dirVar,
    REQUIRED.map((k) => join(dir, k)),
  );
}
