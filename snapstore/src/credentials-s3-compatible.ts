/**
 * Credentials of the two S3-compatible providers upstream reaches through its generic S3 client
 * (upstream `pkg/snapstore/s3_snapstore.go`), both static keys with path-style addressing:
 * - Dell ECS: environment only, `ECS_ENDPOINT`, `ECS_ACCESS_KEY_ID`, `ECS_SECRET_ACCESS_KEY` (required),
 *   `ECS_DISABLE_SSL`, `ECS_INSECURE_SKIP_VERIFY` (default false); region `US-Standard`.
 * - OpenShift Container Storage: `<P>OPENSHIFT_APPLICATION_CREDENTIALS_JSON` or `..._CREDENTIALS` (a
 *   directory), keys `endpoint, region, accessKeyID, secretAccessKey` (required) and `disableSSL,
 *   insecureSkipVerify`.
 */
import type { S3CompatibleCredentials } from './config.js';
import {
  fail,
  locateCredentials,
  locationModifiedTime,
  lookup,
  parseBool,
  readCredentialFields,
  requireFields,
} from './credential-files.js';
import type { CredentialEnv, CredentialSource } from './credential-files.js';

export const ECS_REGION = 'US-Standard';
/** In lookup order; the first three are required. */
export const ECS_ENV_VARS = [
  'ECS_ENDPOINT',
  'ECS_ACCESS_KEY_ID',
  'ECS_SECRET_ACCESS_KEY',
  'ECS_DISABLE_SSL',
  'ECS_INSECURE_SKIP_VERIFY',
] as const;

/**
 * ECS credentials from the environment (pure). Upstream has no prefixed variables, so a copy source or
 * secondary ECS store uses `SOURCE_ECS_*` / `SECONDARY_ECS_*` when `<P>ECS_ENDPOINT` is set and the plain
 * `ECS_*` variables otherwise, as upstream does.
 */
export function readEcsCredentials(env: CredentialEnv, prefix: string): S3CompatibleCredentials {
  const p = prefix !== '' && lookup(env, `${prefix}ECS_ENDPOINT`) !== undefined ? prefix : '';
  const required = (name: string): string => {
    const v = lookup(env, `${p}${name}`);
    if (v === undefined)
      throw fail(
        `ECS credentials: environment variable ${p}${name} is not set (ECS reads ${p}ECS_ENDPOINT, ${p}ECS_ACCESS_KEY_ID and ${p}ECS_SECRET_ACCESS_KEY)`,
      );
    return v;
  };
  const flag = (name: string): boolean => {
    const v = lookup(env, `${p}${name}`);
    return v === undefined ? false : parseBool(`${p}${name}`, 'environment', v);
  };
  return {
    endpoint: required('ECS_ENDPOINT'),
    accessKeyID: required('ECS_ACCESS_KEY_ID'),
    secretAccessKey: required('ECS_SECRET_ACCESS_KEY'),
    region: ECS_REGION,
    disableSSL: flag('ECS_DISABLE_SSL'),
    insecureSkipVerify: flag('ECS_INSECURE_SKIP_VERIFY'),
  };
}

export const OCS_BASE = 'OPENSHIFT_APPLICATION_CREDENTIALS';
const OCS_REQUIRED = ['endpoint', 'region', 'accessKeyID', 'secretAccessKey'] as const;
const OCS_BOOLS = ['disableSSL', 'insecureSkipVerify'] as const;
type OcsString = (typeof OCS_REQUIRED)[number];
type OcsBool = (typeof OCS_BOOLS)[number];

/** Checks the OCS fields of one file or directory (pure); each missing one is named with its file. */
export function ocsCredentialsFromFields(
  envVar: string,
  source: CredentialSource,
  f: Partial<Record<OcsString, string>>,
  bools: Partial<Record<OcsBool, boolean>>,
): S3CompatibleCredentials {
  requireFields(envVar, 'OCS', source, f, OCS_REQUIRED);
  return {
    endpoint: f.endpoint as string,
    region: f.region as string,
    accessKeyID: f.accessKeyID as string,
    secretAccessKey: f.secretAccessKey as string,
    disableSSL: bools.disableSSL ?? false,
    insecureSkipVerify: bools.insecureSkipVerify ?? false,
  };
}

/** OCS credentials; an error when neither variable is set (upstream: `unable to get credentials`). */
export async function readOcsCredentials(env: CredentialEnv, prefix: string): Promise<S3CompatibleCredentials> {
  const jsonVar = `${prefix}${OCS_BASE}_JSON`;
  const dirVar = `${prefix}${OCS_BASE}`;
  const loc = await locateCredentials(env, jsonVar, dirVar);
  if (loc === undefined) throw fail(`unable to get credentials: set ${jsonVar} (a JSON file) or ${dirVar} (a directory) for the OCS store`);
  const { strings, bools } = await readCredentialFields(loc, { strings: OCS_REQUIRED, bools: OCS_BOOLS });
  return ocsCredentialsFromFields(loc.envVar, loc, strings, bools);
}

/** Upstream `GetOCSCredentialsLastModifiedTime`: the JSON file, or `accessKeyID, region, endpoint, secretAccessKey`. */
export async function ocsCredentialsModifiedTime(env: CredentialEnv, prefix: string): Promise<Date | undefined> {
  const loc = await locateCredentials(env, `${prefix}${OCS_BASE}_JSON`, `${prefix}${OCS_BASE}`);
  return loc === undefined ? undefined : locationModifiedTime(loc, ['accessKeyID', 'region', 'endpoint', 'secretAccessKey']);
}

/**
 * The S3 endpoint URL: as given when it has a scheme, else `http://` with disableSSL and `https://`
 * without (the AWS SDK's DisableSSL only chooses the scheme of an endpoint that has none).
 */
export function s3CompatibleEndpoint(c: S3CompatibleCredentials): string {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(c.endpoint) ? c.endpoint : `${c.disableSSL ? 'http' : 'https'}://${c.endpoint}`;
}
