/**
 * OpenStack Identity (Keystone) v3 token authentication, as documented in the Identity API v3 reference
 * ("Password authentication with scoped authorization", "Authenticating with an Application Credential"):
 * `POST <auth>/v3/auth/tokens`, the token in the `X-Subject-Token` header, the service catalog in the body.
 * The request body and the catalog lookup are pure; `authenticate` is the one network call.
 */
import type { SwiftCredentials } from '../config.js';
import { SnapStoreError } from '../errors.js';
import { classifyStoreFailure, describeError } from './common.js';

export interface KeystoneToken {
  token: string;
  /** The object-store endpoint chosen from the catalog, without trailing slash (`.../v1/AUTH_<project>`). */
  storageUrl: string;
  expiresAt?: Date;
}

/** `<authURL>/auth/tokens` when authURL names the v3 API, else `<authURL>/v3/auth/tokens`. */
export function tokensUrl(authURL: string): string {
  const base = authURL.replace(/\/+$/, '');
  return /\/v3$/.test(base) ? `${base}/auth/tokens` : `${base}/v3/auth/tokens`;
}

/** The JSON body of the token request (pure). Application credentials carry their own scope. */
export function tokenRequestBody(c: SwiftCredentials): Record<string, unknown> {
  if (c.applicationCredential) {
    const ac = c.applicationCredential;
    // By ID when known (unique); by name only together with the user, as the API requires.
    const credential =
      ac.id !== '' ? { id: ac.id, secret: ac.secret } : { name: ac.name, secret: ac.secret, user: { name: c.password?.username } };
    return { auth: { identity: { methods: ['application_credential'], application_credential: credential } } };
  }
  if (!c.password) throw new SnapStoreError('E_CREDENTIALS', 'Swift credentials have neither a password nor an application credential');
  const user: Record<string, unknown> = { name: c.password.username, password: c.password.password };
  if (c.userDomainName) user['domain'] = { name: c.userDomainName };
  const auth: Record<string, unknown> = { identity: { methods: ['password'], password: { user } } };
  if (c.tenantId) auth['scope'] = { project: { id: c.tenantId } };
  else if (c.tenantName) {
    auth['scope'] = { project: { name: c.tenantName, ...(c.projectDomainName ? { domain: { name: c.projectDomainName } } : {}) } };
  }
  return { auth };
}

interface CatalogEndpoint {
  interface?: unknown;
  region?: unknown;
  region_id?: unknown;
  url?: unknown;
}

/**
 * The public object-store endpoint of the token's catalog (pure), in `region` when given. Like
 * gophercloud, more than one match without a region to choose is an error rather than a guess.
 */
export function objectStoreEndpoint(body: unknown, region: string | undefined, where: string): string {
  const catalog = (body as { token?: { catalog?: unknown } } | null)?.token?.catalog;
  if (!Array.isArray(catalog))
    throw new SnapStoreError('E_CREDENTIALS', `${where}: the token has no service catalog (is it scoped to a project?)`);
  const urls: string[] = [];
  const regions = new Set<string>();
  for (const service of catalog as { type?: unknown; endpoints?: unknown }[]) {
    if (service?.type !== 'object-store' || !Array.isArray(service.endpoints)) continue;
    for (const e of service.endpoints as CatalogEndpoint[]) {
      if (e.interface !== 'public' || typeof e.url !== 'string') continue;
      const r = typeof e.region_id === 'string' ? e.region_id : typeof e.region === 'string' ? e.region : '';
      regions.add(r);
      if (region === undefined || region === '' || r === region || e.region === region) urls.push(e.url.replace(/\/+$/, ''));
    }
  }
  const unique = [...new Set(urls)];
  if (unique.length === 1) return unique[0] as string;
  if (unique.length === 0) {
    const known =
      regions.size === 0 ? 'the catalog has no public object-store endpoint' : `public object-store regions: ${[...regions].join(', ')}`;
    throw new SnapStoreError('E_CONFIG', `${where}: no public object-store endpoint${region ? ` in region ${region}` : ''} (${known})`);
  }
  throw new SnapStoreError(
    'E_CONFIG',
    `${where}: ${unique.length} public object-store endpoints and no region to choose one; set the credentials' region or OS_REGION_NAME (regions: ${[...regions].join(', ')})`,
  );
}

/** Asks Keystone for a token and the object-store endpoint. Rejections are E_CREDENTIALS, network failures E_UNREACHABLE. */
export async function authenticate(c: SwiftCredentials, timeoutMs: number, signal?: AbortSignal): Promise<KeystoneToken> {
  const url = tokensUrl(c.authURL);
  const where = `Keystone ${url}`;
  let res: Response;
  try {
    const timeout = AbortSignal.timeout(timeoutMs);
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(tokenRequestBody(c)),
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
  } catch (err) {
    if (err instanceof SnapStoreError) throw err;
    throw new SnapStoreError('E_UNREACHABLE', `${where} is unreachable: ${describeError(err)}`, { cause: err });
  }
  const text = await res.text().catch(() => '');
  if (res.status === 401 || res.status === 403) {
    throw new SnapStoreError('E_CREDENTIALS', `${where} rejected the credentials (HTTP ${res.status}): ${text.slice(0, 300)}`);
  }
  if (res.status !== 201 && res.status !== 200 && classifyStoreFailure({ status: res.status }) === 'E_UNREACHABLE') {
    throw new SnapStoreError('E_UNREACHABLE', `${where} answered HTTP ${res.status}: ${text.slice(0, 300)}`);
  }
  // Any other refusal of the token request (400 for a malformed identity, 404 for a wrong auth URL path) is
  // about the credentials file, which names both.
  if (res.status !== 201 && res.status !== 200) {
    throw new SnapStoreError('E_CREDENTIALS', `${where} refused the token request (HTTP ${res.status}): ${text.slice(0, 300)}`);
  }
  const token = res.headers.get('x-subject-token');
  if (!token) throw new SnapStoreError('E_CREDENTIALS', `${where} answered without an X-Subject-Token header`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new SnapStoreError('E_CREDENTIALS', `${where} answered with a body that is not JSON`, { cause: err });
  }
  const storageUrl = objectStoreEndpoint(body, c.region, where);
  const expires = (body as { token?: { expires_at?: unknown } }).token?.expires_at;
  const expiresAt = typeof expires === 'string' ? new Date(expires) : undefined;
  return { token, storageUrl, ...(expiresAt && !Number.isNaN(expiresAt.getTime()) ? { expiresAt } : {}) };
}
