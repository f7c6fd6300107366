/**
 * OpenStack Swift credentials, as etcd-backup-restore reads them (upstream `pkg/snapstore/swift_snapstore.go`):
 * `<P>OPENSTACK_APPLICATION_CREDENTIALS_JSON` (a JSON file), else `<P>OPENSTACK_APPLICATION_CREDENTIALS`
 * (a directory: its first `*.json` file, or one file per key), else the gophercloud `OS_*` environment
 * (`SOURCE_OS_*` for the copy source, `SECONDARY_OS_*` for the secondary store).
 *
 * Keys: `authURL, domainName, tenantName, region` and either `username, password` (Keystone password
 * authentication scoped to the project `tenantName` in `domainName`) or `applicationCredentialID,
 * applicationCredentialName, applicationCredentialSecret` (an application credential, already scoped).
 * Giving fields of both kinds is an error, as upstream.
 */
import { join } from 'node:path';
import type { SwiftCredentials } from './config.js';
import {
  fail,
  locateCredentials,
  locationModifiedTime,
  lookup,
  readCredentialFields,
  requireFields,
  sourceText,
  statOrUndefined,
} from './credential-files.js';
import type { CredentialEnv, CredentialSource } from './credential-files.js';

export const SWIFT_BASE = 'OPENSTACK_APPLICATION_CREDENTIALS';

const COMMON_KEYS = ['authURL', 'tenantName', 'domainName'] as const;
const PASSWORD_KEYS = ['username', 'password'] as const;
const APP_CREDENTIAL_KEYS = ['applicationCredentialID', 'applicationCredentialName', 'applicationCredentialSecret'] as const;
const ALL_KEYS = [...COMMON_KEYS, 'region', ...PASSWORD_KEYS, ...APP_CREDENTIAL_KEYS] as const;

type SwiftKey = (typeof ALL_KEYS)[number];
/** The fields as found in a file or directory; absent or empty fields are missing. */
export type SwiftFields = Partial<Record<SwiftKey, string>>;

const has = (f: SwiftFields, k: SwiftKey): boolean => (f[k] ?? '') !== '';

/**
 * Validates the fields of one credential file or directory and builds the credentials (pure).
 * Each missing field is named with the file it should be in.
 */
export function swiftCredentialsFromFields(envVar: string, source: CredentialSource, f: SwiftFields): SwiftCredentials {
  const where = sourceText(source);
  const password = PASSWORD_KEYS.some((k) => has(f, k));
  const appCredential = APP_CREDENTIAL_KEYS.some((k) => has(f, k));
  if (password && appCredential) {
    throw fail(
      `${envVar}: Swift ${where} mixes password credentials (username, password) with an application credential ` +
        `(applicationCredentialID, applicationCredentialName, applicationCredentialSecret); give one kind only`,
    );
  }
  if (!password && !appCredential) {
    throw fail(
      `${envVar}: Swift ${where} has neither username and password nor applicationCredentialID, ` +
        `applicationCredentialName and applicationCredentialSecret`,
    );
  }
  const required = [...COMMON_KEYS, ...(password ? PASSWORD_KEYS : APP_CREDENTIAL_KEYS)];
  requireFields(envVar, 'Swift', source, f, required);

  const c: SwiftCredentials = {
    authURL: f.authURL as string,
    userDomainName: f.domainName as string,
    projectDomainName: f.domainName as string,
    tenantName: f.tenantName as string,
  };
  if (has(f, 'region')) c.region = f.region as string;
  if (password) c.password = { username: f.username as string, password: f.password as string };
  else {
    c.applicationCredential = {
      id: f.applicationCredentialID as string,
      name: f.applicationCredentialName as string,
      secret: f.applicationCredentialSecret as string,
    };
  }
  return c;
}

/** `OS_` for the primary store, `SOURCE_OS_` for the copy source (upstream), `SECONDARY_OS_` for the secondary. */
export function openstackEnvPrefix(prefix: '' | 'SOURCE_' | 'SECONDARY_'): string {
  return `${prefix}OS_`;
}

/**
 * Credentials from the gophercloud environment variables (pure). `<OS>AUTH_URL` is required; then
 * `<OS>USERNAME`/`<OS>PASSWORD` or `<OS>APPLICATION_CREDENTIAL_ID`/`..._SECRET`; the project from
 * `<OS>PROJECT_NAME`/`<OS>TENANT_NAME` or `<OS>PROJECT_ID`/`<OS>TENANT_ID`; domains from
 * `<OS>USER_DOMAIN_NAME`/`<OS>PROJECT_DOMAIN_NAME`, falling back to `<OS>DOMAIN_NAME`.
 */
export function swiftCredentialsFromEnv(env: CredentialEnv, os: string, filesHint: string): SwiftCredentials {
  const v = (name: string): string | undefined => lookup(env, `${os}${name}`);
  const authURL = v('AUTH_URL');
  if (authURL === undefined) {
    throw fail(`unable to get Swift credentials: set ${filesHint}, or ${os}AUTH_URL and the other ${os}* variables`);
  }
  const username = v('USERNAME');
  const password = v('PASSWORD');
  const appId = v('APPLICATION_CREDENTIAL_ID');
  const appSecret = v('APPLICATION_CREDENTIAL_SECRET');
  if ((username !== undefined || password !== undefined) && (appId !== undefined || appSecret !== undefined)) {
    throw fail(`${os}* environment mixes ${os}USERNAME/${os}PASSWORD with ${os}APPLICATION_CREDENTIAL_*; give one kind only`);
  }
  const domain = v('DOMAIN_NAME');
  const c: SwiftCredentials = { authURL };
  const userDomain = v('USER_DOMAIN_NAME') ?? domain;
  const projectDomain = v('PROJECT_DOMAIN_NAME') ?? domain;
  if (userDomain !== undefined) c.userDomainName = userDomain;
  if (projectDomain !== undefined) c.projectDomainName = projectDomain;
  const tenantName = v('PROJECT_NAME') ?? v('TENANT_NAME');
  const tenantId = v('PROJECT_ID') ?? v('TENANT_ID');
  if (tenantName !== undefined) c.tenantName = tenantName;
  if (tenantId !== undefined) c.tenantId = tenantId;
  const region = v('REGION_NAME');
  if (region !== undefined) c.region = region;
  if (appId !== undefined || appSecret !== undefined) {
    if (appId === undefined || appSecret === undefined) {
      throw fail(`${os}APPLICATION_CREDENTIAL_ID and ${os}APPLICATION_CREDENTIAL_SECRET must both be set`);
    }
    c.applicationCredential = { id: appId, secret: appSecret };
    const name = v('APPLICATION_CREDENTIAL_NAME');
    if (name !== undefined) c.applicationCredential.name = name;
    return c;
  }
  if (username === undefined || password === undefined) {
    throw fail(`${os}USERNAME and ${os}PASSWORD (or ${os}APPLICATION_CREDENTIAL_ID and ${os}APPLICATION_CREDENTIAL_SECRET) must be set`);
  }
  c.password = { username, password };
  return c;
}

/**
 * Swift credentials for the store with env prefix `prefix`. The endpoint region is `<OS>REGION_NAME`
 * when set (upstream reads `OS_REGION_NAME` for it), else the credentials' `region`.
 */
export async function readSwiftCredentials(env: CredentialEnv, prefix: '' | 'SOURCE_' | 'SECONDARY_'): Promise<SwiftCredentials> {
  const jsonVar = `${prefix}${SWIFT_BASE}_JSON`;
  const dirVar = `${prefix}${SWIFT_BASE}`;
  const os = openstackEnvPrefix(prefix);
  const withRegion = (c: SwiftCredentials): SwiftCredentials => {
    const region = lookup(env, `${os}REGION_NAME`);
    return region === undefined ? c : { ...c, region };
  };
  const loc = await locateCredentials(env, jsonVar, dirVar);
  if (loc === undefined) return swiftCredentialsFromEnv(env, os, `${jsonVar} (a JSON file) or ${dirVar} (a directory)`);
  const { strings } = await readCredentialFields(loc, { strings: ALL_KEYS });
  return withRegion(swiftCredentialsFromFields(loc.envVar, loc, strings));
}

/**
 * Newest modification time of the Swift credential files (upstream `GetSwiftCredentialsLastModifiedTime`):
 * the JSON file, else in the directory `authURL, tenantName, domainName` with `username, password` or the
 * three application credential files. Undefined with the `OS_*` environment only (nothing to watch).
 */
export async function swiftCredentialsModifiedTime(env: CredentialEnv, prefix: '' | 'SOURCE_' | 'SECONDARY_'): Promise<Date | undefined> {
  const loc = await locateCredentials(env, `${prefix}${SWIFT_BASE}_JSON`, `${prefix}${SWIFT_BASE}`);
  if (loc === undefined) return undefined;
  let password = false;
  if (loc.kind === 'dir') for (const k of PASSWORD_KEYS) if ((await statOrUndefined(join(loc.path, k))) !== undefined) password = true;
  return locationModifiedTime(loc, [...COMMON_KEYS, ...(password ? PASSWORD_KEYS : APP_CREDENTIAL_KEYS)]);
}
