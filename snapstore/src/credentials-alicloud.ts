/**
 * Alibaba Cloud OSS credentials (upstream `pkg/snapstore/oss_snapstore.go`): `<P>ALICLOUD_APPLICATION_CREDENTIALS_JSON`
 * (a JSON file) or `<P>ALICLOUD_APPLICATION_CREDENTIALS` (a directory: its first `*.json` file, or one
 * file per key). `storageEndpoint`, `accessKeyID` and `accessKeySecret` are required (upstream checks the
 * directory form only; a JSON file without them could only fail later, so both forms are checked here);
 * `bucketName` is accepted and ignored (`--store-container` names the bucket).
 */
import type { OssCredentials } from './config.js';
import { fail, locateCredentials, locationModifiedTime, readCredentialFields, requireFields } from './credential-files.js';
import type { CredentialEnv, CredentialSource } from './credential-files.js';

export const OSS_BASE = 'ALICLOUD_APPLICATION_CREDENTIALS';

const REQUIRED = ['storageEndpoint', 'accessKeyID', 'accessKeySecret'] as const;
type OssKey = (typeof REQUIRED)[number];

/** Checks the fields of one file or directory (pure); each missing one is named with its file. */
export function ossCredentialsFromFields(envVar: string, source: CredentialSource, f: Partial<Record<OssKey, string>>): OssCredentials {
  requireFields(envVar, 'OSS', source, f, REQUIRED);
  return {
    storageEndpoint: f.storageEndpoint as string,
    accessKeyID: f.accessKeyID as string,
    accessKeySecret: f.accessKeySecret as string,
  };
}

/** OSS credentials; an error when neither variable is set (upstream: `unable to get credentials`). */
export async function readOssCredentials(env: CredentialEnv, prefix: string): Promise<OssCredentials> {
  const jsonVar = `${prefix}${OSS_BASE}_JSON`;
  const dirVar = `${prefix}${OSS_BASE}`;
  const loc = await locateCredentials(env, jsonVar, dirVar);
  if (loc === undefined) throw fail(`unable to get credentials: set ${jsonVar} (a JSON file) or ${dirVar} (a directory) for the OSS store`);
  // bucketName is accepted (type-checked) and ignored: --store-container names the bucket.
  const { strings } = await readCredentialFields(loc, { strings: REQUIRED, checkedOnly: ['bucketName'] });
  return ossCredentialsFromFields(loc.envVar, loc, strings);
}

/** Upstream `GetOSSCredentialsLastModifiedTime`: the JSON file, or `accessKeyID, accessKeySecret, storageEndpoint`. */
export async function ossCredentialsModifiedTime(env: CredentialEnv, prefix: string): Promise<Date | undefined> {
  const loc = await locateCredentials(env, `${prefix}${OSS_BASE}_JSON`, `${prefix}${OSS_BASE}`);
  return loc === undefined ? undefined : locationModifiedTime(loc, REQUIRED);
}
