/**
 * Credential environment variables and files, as etcd-backup-restore reads them (upstream
 * `pkg/snapstore/*_snapstore.go`), and their modification time for rotation detection.
 *
 * Lookup order per provider and prefix P ('' primary, 'SOURCE_' copy source, 'SECONDARY_' secondary store):
 * 1. `<P><BASE>_JSON`: a JSON file;
 * 2. `<P><BASE>`: a directory; if it holds a `*.json` file, the first one by name is used as the JSON file,
 *    otherwise each key is a file of that name whose (trimmed) content is the value;
 * 3. nothing set: S3 uses the AWS SDK's default chain (undefined), ABS fails, GCS uses Google's application
 *    default credentials (undefined) except for the copy source, which must be explicit.
 *
 * The environment is passed in; nothing here reads process.env. Every error is an E_CREDENTIALS
 * SnapStoreError naming the variable, the file and what is wrong with it.
 */
import { dirname, join } from 'node:path';
import type { AbsCredentials, GcsCredentials, OssCredentials, S3CompatibleCredentials, S3Credentials, SwiftCredentials } from './config.js';
import type { SnapStoreError } from './errors.js';
import {
  allExist,
  fail,
  findJsonInDir,
  jsonBool,
  jsonString,
  lookup,
  maxMtime,
  parseBool,
  readDirValues,
  readJsonObject,
  readText,
  statOrUndefined,
} from './credential-files.js';
import type { CredentialEnv } from './credential-files.js';
import { OSS_BASE, ossCredentialsModifiedTime, readOssCredentials } from './credentials-alicloud.js';
import { ECS_ENV_VARS, OCS_BASE, ocsCredentialsModifiedTime, readEcsCredentials, readOcsCredentials } from './credentials-s3-compatible.js';
import { SWIFT_BASE, readSwiftCredentials, swiftCredentialsModifiedTime } from './credentials-openstack.js';

export type { CredentialEnv } from './credential-files.js';
/** '' = primary store, 'SOURCE_' = copy source, 'SECONDARY_' = secondary store. */
export type CredentialEnvPrefix = '' | 'SOURCE_' | 'SECONDARY_';

const S3_BASE = 'AWS_APPLICATION_CREDENTIALS';
const ABS_BASE = 'AZURE_APPLICATION_CREDENTIALS';
const GCS_BASE = 'GOOGLE_APPLICATION_CREDENTIALS';

/** The environment variables that configure a provider's credentials, in lookup order. */
export function credentialEnvVars(provider: string, prefix: CredentialEnvPrefix): string[] {
  switch (provider) {
    case 'S3':
      return [`${prefix}${S3_BASE}_JSON`, `${prefix}${S3_BASE}`];
    case 'ABS':
      return [`${prefix}${ABS_BASE}_JSON`, `${prefix}${ABS_BASE}`];
    case 'GCS':
      return [`${prefix}${GCS_BASE}`];
    case 'Swift':
      return [`${prefix}${SWIFT_BASE}_JSON`, `${prefix}${SWIFT_BASE}`];
    case 'OSS':
      return [`${prefix}${OSS_BASE}_JSON`, `${prefix}${OSS_BASE}`];
    case 'OCS':
      return [`${prefix}${OCS_BASE}_JSON`, `${prefix}${OCS_BASE}`];
    case 'ECS':
      return ECS_ENV_VARS.map((v) => `${prefix}${v}`);
    default:
      return [];
  }
}

// ---------------------------------------------------------------------------------------------- S3

const S3_STRING_KEYS = [
  'accessKeyID',
  'secretAccessKey',
  'region',
  'endpoint',
  'trustedCaCert',
  'sseCustomerKey',
  'sseCustomerAlgorithm',
  'roleARN',
  'requestChecksumCalculation',
  'responseChecksumValidation',
] as const;
const S3_BOOL_KEYS = ['s3ForcePathStyle', 'insecureSkipVerify'] as const;

function s3FromJson(envVar: string, path: string, obj: Record<string, unknown>): S3Credentials {
  const c: S3Credentials = {};
  for (const k of S3_STRING_KEYS) {
    const v = jsonString(envVar, path, obj, k);
    if (v !== undefined) (c as Record<string, unknown>)[k] = v;
  }
  for (const k of S3_BOOL_KEYS) {
    const v = jsonBool(envVar, path, obj, k);
    if (v !== undefined) c[k] = v;
  }
  const tokenPath = jsonString(envVar, path, obj, 'tokenPath');
  if (tokenPath !== undefined) c.tokenPath = tokenPath;
  return c;
}

async function s3FromDir(envVar: string, dir: string): Promise<S3Credentials> {
  // The SSE-C key is used byte for byte, as upstream does; everything else is trimmed.
  const values = await readDirValues(envVar, dir, [...S3_STRING_KEYS, ...S3_BOOL_KEYS], ['sseCustomerKey']);
  const c: S3Credentials = {};
  for (const k of S3_STRING_KEYS) {
    const v = values.get(k);
    if (v !== undefined) (c as Record<string, unknown>)[k] = v;
  }
  for (const k of S3_BOOL_KEYS) {
    const v = values.get(k);
    if (v !== undefined) c[k] = parseBool(envVar, join(dir, k), v);
  }
  if ((await statOrUndefined(join(dir, 'token'))) !== undefined) c.tokenPath = join(dir, 'token');
  // Upstream validates the directory form only.
  if (c.region === undefined || c.region === '') {
    throw fail(`${envVar}: S3 credential directory ${dir}: region is missing (file ${join(dir, 'region')})`);
  }
  const staticCreds = (c.accessKeyID ?? '') !== '' && (c.secretAccessKey ?? '') !== '';
  const webIdentity = (c.roleARN ?? '') !== '' && c.tokenPath !== undefined;
  if (!staticCreds && !webIdentity) {
    throw fail(
      `${envVar}: S3 credential directory ${dir}: set either accessKeyID and secretAccessKey, or roleARN and token (one file per key)`,
    );
  }
  return c;
}

const CHECKSUM_VALUES = ['when_supported', 'when_required'] as const;

/** Checks shared by both forms (upstream `awsCredentialsFromConfig`). */
function checkS3(envVar: string, source: string, c: S3Credentials): S3Credentials {
  if ((c.sseCustomerKey === undefined) !== (c.sseCustomerAlgorithm === undefined)) {
    throw fail(`${envVar}: ${source}: both sseCustomerKey and sseCustomerAlgorithm must be given to use customer-managed SSE keys`);
  }
  for (const k of ['requestChecksumCalculation', 'responseChecksumValidation'] as const) {
    const v = c[k];
    if (v === undefined) continue;
    const lower = v.toLowerCase();
    if (lower !== 'when_supported' && lower !== 'when_required') {
      throw fail(`${envVar}: ${source}: invalid value ${JSON.stringify(v)} for ${k}, must be ${CHECKSUM_VALUES.join(' or ')}`);
    }
    c[k] = lower;
  }
  return c;
}

/**
 * S3 credentials from `<P>AWS_APPLICATION_CREDENTIALS_JSON` or `<P>AWS_APPLICATION_CREDENTIALS`;
 * undefined when neither is set (the AWS SDK's default credential chain applies).
 */
export async function readS3Credentials(env: CredentialEnv, prefix: CredentialEnvPrefix): Promise<S3Credentials | undefined> {
  const [jsonVar, dirVar] = credentialEnvVars('S3', prefix) as [string, string];
  const jsonFile = lookup(env, jsonVar);
  if (jsonFile !== undefined) {
    return checkS3(jsonVar, `credential file ${jsonFile}`, s3FromJson(jsonVar, jsonFile, await readJsonObject(jsonVar, jsonFile)));
  }
  const dir = lookup(env, dirVar);
  if (dir === undefined) return undefined;
  const inDir = await findJsonInDir(dirVar, dir);
  if (inDir !== undefined) {
    return checkS3(dirVar, `credential file ${inDir}`, s3FromJson(dirVar, inDir, await readJsonObject(dirVar, inDir)));
  }
  return checkS3(dirVar, `credential directory ${dir}`, await s3FromDir(dirVar, dir));
}

// --------------------------------------------------------------------------------------------- ABS

function checkAbs(
  envVar: string,
  source: string,
  account: string | undefined,
  key: string | undefined,
  domain: string | undefined,
): AbsCredentials {
  if (account === undefined || account === '' || key === undefined || key === '') {
    const missing = [account === undefined || account === '' ? 'storageAccount' : '', key === undefined || key === '' ? 'storageKey' : '']
      .filter((x) => x !== '')
      .join(' and ');
    throw fail(`${envVar}: ${source}: ${missing} missing`);
  }
  const c: AbsCredentials = { storageAccount: account, storageKey: key };
  if (domain !== undefined && domain !== '') c.domain = domain;
  return c;
}

async function absFromJsonFile(envVar: string, path: string): Promise<AbsCredentials> {
  const obj = await readJsonObject(envVar, path);
  return checkAbs(
    envVar,
    `credential file ${path}`,
    jsonString(envVar, path, obj, 'storageAccount'),
    jsonString(envVar, path, obj, 'storageKey'),
    jsonString(envVar, path, obj, 'domain'),
  );
}

/** Azure credentials; an error when neither variable is set (upstream: `unable to get credentials`). */
export async function readAbsCredentials(env: CredentialEnv, prefix: CredentialEnvPrefix): Promise<AbsCredentials> {
  const [jsonVar, dirVar] = credentialEnvVars('ABS', prefix) as [string, string];
  const jsonFile = lookup(env, jsonVar);
  if (jsonFile !== undefined) return absFromJsonFile(jsonVar, jsonFile);
  const dir = lookup(env, dirVar);
  if (dir === undefined) {
    throw fail(`unable to get credentials: set ${jsonVar} (a JSON file) or ${dirVar} (a directory) for the Azure Blob store`);
  }
  const inDir = await findJsonInDir(dirVar, dir);
  if (inDir !== undefined) return absFromJsonFile(dirVar, inDir);
  const v = await readDirValues(dirVar, dir, ['storageAccount', 'storageKey', 'domain']);
  return checkAbs(dirVar, `credential directory ${dir}`, v.get('storageAccount'), v.get('storageKey'), v.get('domain'));
}

// --------------------------------------------------------------------------------------------- GCS

const SERVICE_ACCOUNT_FIELDS = new Set([
  'type',
  'project_id',
  'client_email',
  'universe_domain',
  'auth_uri',
  'auth_provider_x509_cert_url',
  'client_x509_cert_url',
  'client_id',
  'private_key_id',
  'private_key',
  'token_uri',
]);
const EXTERNAL_ACCOUNT_REQUIRED = ['audience', 'credential_source', 'subject_token_type', 'token_url', 'type', 'universe_domain'];
const EXTERNAL_ACCOUNT_FIELDS = new Set([...EXTERNAL_ACCOUNT_REQUIRED, 'service_account_impersonation_url']);
const PROJECT_ID = /^[a-z][a-z0-9-]{4,28}[a-z0-9]$/;
const IMPERSONATION_URL = /^https:\/\/iamcredentials\.googleapis\.com\/v1\/projects\/-\/serviceAccounts\/.+:generateAccessToken$/;
const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';
const STS_TOKEN_URL = 'https://sts.googleapis.com/v1/token';

type GcsKind = 'service_account' | 'external_account';

/** Validates the parsed JSON as upstream's providers accept it; returns its kind. */
function checkGcsJson(envVar: string, path: string, obj: Record<string, unknown>): GcsKind {
  const bad = (what: string): SnapStoreError => fail(`${envVar}: GCS credential file ${path}: ${what}`);
  const type = obj['type'];
  if (type === 'service_account') {
    for (const k of Object.keys(obj)) if (!SERVICE_ACCOUNT_FIELDS.has(k)) throw bad(`field "${k}" is not allowed in a service_account key`);
    for (const k of ['project_id', 'client_email', 'private_key']) {
      if (typeof obj[k] !== 'string' || obj[k] === '') throw bad(`"${k}" is missing`);
    }
    for (const k of Object.keys(obj)) if (typeof obj[k] !== 'string') throw bad(`"${k}" must be a string`);
    if (!PROJECT_ID.test(obj['project_id'] as string)) {
      throw bad(`"project_id" ${JSON.stringify(obj['project_id'])} is not a valid project ID (${PROJECT_ID.source})`);
    }
    return 'service_account';
  }
  if (type === 'external_account') {
    for (const k of Object.keys(obj))
      if (!EXTERNAL_ACCOUNT_FIELDS.has(k)) throw bad(`field "${k}" is not allowed in an external_account configuration`);
    for (const k of EXTERNAL_ACCOUNT_REQUIRED) if (obj[k] === undefined || obj[k] === null || obj[k] === '') throw bad(`"${k}" is missing`);
    if (obj['subject_token_type'] !== JWT_TOKEN_TYPE) throw bad(`"subject_token_type" must be ${JSON.stringify(JWT_TOKEN_TYPE)}`);
    if (obj['token_url'] !== STS_TOKEN_URL) throw bad(`"token_url" must be ${JSON.stringify(STS_TOKEN_URL)}`);
    const imp = obj['service_account_impersonation_url'];
    if (imp !== undefined && (typeof imp !== 'string' || !IMPERSONATION_URL.test(imp))) {
      throw bad(`"service_account_impersonation_url" must match ${IMPERSONATION_URL.source}`);
    }
    const expectedSource = JSON.stringify({ file: join(dirname(path), 'token'), format: { type: 'text' } });
    if (JSON.stringify(normaliseSource(obj['credential_source'])) !== expectedSource) {
      throw bad(`"credential_source" must be ${expectedSource}`);
    }
    return 'external_account';
  }
  throw bad(`"type" must be "service_account" or "external_account", got ${JSON.stringify(type)}`);
}

/** Key order independent form of credential_source for comparison. */
function normaliseSource(v: unknown): unknown {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return v;
  const o = v as Record<string, unknown>;
  const fmt = o['format'];
  const keys = Object.keys(o).sort();
  if (keys.join(',') !== 'file,format' || typeof fmt !== 'object' || fmt === null) return v;
  return { file: o['file'], format: { ...(fmt as Record<string, unknown>) } };
}

async function optionalSibling(envVar: string, path: string, name: string): Promise<string | undefined> {
  const p = join(dirname(path), name);
  if ((await statOrUndefined(p)) === undefined) return undefined;
  return (await readText(envVar, p)).trim();
}

/**
 * GCS credentials from `<P>GOOGLE_APPLICATION_CREDENTIALS` (a JSON file), validated. Unset: undefined
 * (application default credentials) for the primary and secondary store; an error for the copy source,
 * which would otherwise silently use the destination's credentials.
 */
export async function readGcsCredentials(env: CredentialEnv, prefix: CredentialEnvPrefix): Promise<GcsCredentials | undefined> {
  const envVar = `${prefix}${GCS_BASE}`;
  const keyFile = lookup(env, envVar);
  if (keyFile === undefined) {
    if (prefix === 'SOURCE_') throw fail(`${envVar} is not set; the copy source GCS store needs its own credentials file`);
    return undefined;
  }
  const json = await readJsonObject(envVar, keyFile);
  const kind = checkGcsJson(envVar, keyFile, json);
  const c: GcsCredentials = { keyFile, json };
  if (kind === 'service_account') {
    c.projectId = json['project_id'] as string;
  } else {
    const projectId = await optionalSibling(envVar, keyFile, 'projectID');
    if (projectId === undefined || projectId === '') {
      throw fail(`${envVar}: external_account credentials need the project ID in ${join(dirname(keyFile), 'projectID')}`);
    }
    c.projectId = projectId;
  }
  const endpoint = await optionalSibling(envVar, keyFile, 'storageAPIEndpoint');
  if (endpoint !== undefined && endpoint !== '') c.storageAPIEndpoint = endpoint;
  return c;
}

/** Credentials for any provider: S3/GCS may be undefined (SDK defaults), Local has none. */
export async function readCredentials(
  provider: string,
  env: CredentialEnv,
  prefix: CredentialEnvPrefix,
): Promise<S3Credentials | AbsCredentials | GcsCredentials | SwiftCredentials | OssCredentials | S3CompatibleCredentials | undefined> {
  switch (provider) {
    case 'S3':
      return readS3Credentials(env, prefix);
    case 'ABS':
      return readAbsCredentials(env, prefix);
    case 'GCS':
      return readGcsCredentials(env, prefix);
    case 'Swift':
      return readSwiftCredentials(env, prefix);
    case 'OSS':
      return readOssCredentials(env, prefix);
    case 'ECS':
      return readEcsCredentials(env, prefix);
    case 'OCS':
      return readOcsCredentials(env, prefix);
    default:
      return undefined;
  }
}

// ------------------------------------------------------------------------------- modification time

/**
 * The newest modification time of the files a provider's credentials are read from, for rotation
 * detection (upstream `GetSnapstoreSecretModifiedTime`). The files are the ones the readers above use,
 * in the same precedence:
 * - a `_JSON` file, or the JSON file found in the directory;
 * - S3 directory: `region, accessKeyID, secretAccessKey`, else `region, roleARN, token`;
 * - ABS directory: `storageAccount, storageKey`;
 * - GCS: the credentials file, plus `token` and `projectID` beside it for external_account;
 * - Swift, OSS and OCS directories: the files of credentials-openstack.ts, -alicloud.ts, -s3-compatible.ts.
 *
 * Undefined means "nothing to watch": Local, ECS (environment only), or no credential variable set (upstream errors then; docs/design-decisions.md).
 * A listed file that is missing is an E_CREDENTIALS error.
 */
export async function credentialsModifiedTime(
  provider: string,
  env: CredentialEnv,
  prefix: CredentialEnvPrefix,
): Promise<Date | undefined> {
  if (provider === 'GCS') {
    const envVar = `${prefix}${GCS_BASE}`;
    const keyFile = lookup(env, envVar);
    if (keyFile === undefined) return undefined;
    const json = await readJsonObject(envVar, keyFile);
    const files = [keyFile];
    if (json['type'] === 'external_account') files.push(join(dirname(keyFile), 'token'), join(dirname(keyFile), 'projectID'));
    return maxMtime(envVar, files);
  }
  if (provider === 'Swift') return swiftCredentialsModifiedTime(env, prefix);
  if (provider === 'OSS') return ossCredentialsModifiedTime(env, prefix);
  if (provider === 'OCS') return ocsCredentialsModifiedTime(env, prefix);
  if (provider !== 'S3' && provider !== 'ABS') return undefined;
  const [jsonVar, dirVar] = credentialEnvVars(provider, prefix) as [string, string];
  const jsonFile = lookup(env, jsonVar);
  if (jsonFile !== undefined) return maxMtime(jsonVar, [jsonFile]);
  const dir = lookup(env, dirVar);
  if (dir === undefined) return undefined;
  const inDir = await findJsonInDir(dirVar, dir);
  if (inDir !== undefined) return maxMtime(dirVar, [inDir]);
  if (provider === 'ABS') return maxMtime(dirVar, [join(dir, 'storageAccount'), join(dir, 'storageKey')]);
  const staticFiles = ['region', 'accessKeyID', 'secretAccessKey'].map((f) => join(dir, f));
  if (await allExist(staticFiles)) return maxMtime(dirVar, staticFiles);
  const webIdentityFiles = ['region', 'roleARN', 'token'].map((f) => join(dir, f));
  if (await allExist(webIdentityFiles)) return maxMtime(dirVar, webIdentityFiles);
  throw fail(`${dirVar}: S3 credential directory ${dir} has neither region, accessKeyID and secretAccessKey nor region, roleARN and token`);
}
