/**
 * The sidecar's own Kubernetes REST client: kubeconfig resolution (YAML, relative files, refusal of what it
 * cannot honour), the service account token re-read when it rotates, Kubernetes Status errors, timeouts,
 * aborts and the answer size bound. Real HTTP throughout: the fake API server, or a bare node:http server
 * where a misbehaving server is the point.
 */
import { once } from 'node:events';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKubeClient } from '../../src/k8s/client.js';
import { isKubeError, isResourceNotServed, KubeStatusError, toKubeError } from '../../src/k8s/errors.js';
import { KubeTransport, TokenFile } from '../../src/k8s/http.js';
import { loadKubeconfig } from '../../src/k8s/kubeconfig.js';
import { FakeKubeApiServer } from '../support/fake-kube.js';
import { seedLease, selfSignedCert, tempDir, type TempDir } from './support.js';

const NS = 'shoot--dev--one';
let dir: TempDir;
let fake: FakeKubeApiServer | undefined;

beforeAll(async () => {
  dir = await tempDir('etcdbr-k8s-http-');
  fake = await FakeKubeApiServer.start({ token: 'token-2' });
  seedLease(fake, NS, 'lease-a', { holderIdentity: 'a' });
});
afterAll(async () => {
  await fake?.stop();
  await dir?.remove();
});

/** A kubeconfig in YAML with one cluster, one user and one context, the user's fields given. */
function yamlKubeconfig(server: string, user: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: c',
    '  cluster:',
    `    server: ${server}`,
    'users:',
    '- name: the-user',
    '  user:',
    ...user.split('\n').map((l) => `    ${l}`),
    'contexts:',
    '- name: ctx',
    '  context: {cluster: c, user: the-user, namespace: ns1}',
    'current-context: ctx',
    '',
  ].join('\n');
}

describe('kubeconfig', () => {
  it('reads YAML; a relative tokenFile is relative to the kubeconfig', async () => {
    const sub = join(dir.path, 'yaml');
    await mkdir(sub);
    await writeFile(join(sub, 'tok'), 'token-2\n');
    const file = join(sub, 'config');
    await writeFile(file, yamlKubeconfig(fake!.url, 'tokenFile: tok'));
    const kc = await loadKubeconfig([file]);
    expect(kc).toMatchObject({ context: 'ctx', namespace: 'ns1', cluster: { server: fake!.url }, user: { tokenFile: join(sub, 'tok') } });
    const kube = await createKubeClient({ kind: 'kubeconfig', paths: [file] });
    expect((await kube.coordination.readNamespacedLease({ namespace: NS, name: 'lease-a' })).spec?.holderIdentity).toBe('a');
    kube.close();
  });

  it.each([
    ['exec', 'exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: gke-gcloud-auth-plugin'],
    ['auth-provider', 'auth-provider:\n  name: oidc'],
    ['username', 'username: admin\npassword: secret'],
  ])('refuses a user with %s, naming the kubeconfig and the user', async (field, user) => {
    const file = join(dir.path, `kc-${field}`);
    await writeFile(file, yamlKubeconfig(fake!.url, user));
    const err = await createKubeClient({ kind: 'kubeconfig', paths: [file] }).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_CONFIG')).toBe(true);
    expect((err as Error).message).toContain(`kubeconfig ${file}: user "the-user" uses ${field}`);
  });

  it('a client certificate needs its key; a missing CA file is named', async () => {
    const tls = await selfSignedCert(dir.path);
    const half = join(dir.path, 'kc-half-cert');
    await writeFile(half, yamlKubeconfig(fake!.url, `client-certificate: ${tls.certFile}`));
    await expect(loadKubeconfig([half])).rejects.toThrow(/user "the-user" needs both a client certificate and a client key/);
    const noCa = join(dir.path, 'kc-no-ca');
    await writeFile(
      noCa,
      yamlKubeconfig(fake!.url, 'token: x').replace(`server: ${fake!.url}`, `server: ${fake!.url}\n    certificate-authority: nope.crt`),
    );
    await expect(loadKubeconfig([noCa])).rejects.toThrow(/certificate-authority .*nope\.crt of "c" cannot be read/);
  });

  it('a context naming an undefined user is an error, not an anonymous client', async () => {
    const file = join(dir.path, 'kc-no-user');
    await writeFile(file, yamlKubeconfig(fake!.url, 'token: x').replace('user: the-user,', 'user: someone-else,'));
    await expect(loadKubeconfig([file])).rejects.toThrow(/names user "someone-else", which no file defines/);
  });
});

describe('service account token', () => {
  it('is re-read when the file changes (bound tokens rotate)', async () => {
    const tokenFile = join(dir.path, 'rotating-token');
    await writeFile(tokenFile, 'token-1');
    const kube = await createKubeClient({ kind: 'server', server: fake!.url });
    const t = new KubeTransport({ server: fake!.url, tokenFile });
    const path = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/lease-a`;
    const err = await t.request('GET', path, undefined).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_FORBIDDEN')).toBe(true);
    // kubelet writes the new token beside the old one and renames it into place.
    await writeFile(`${tokenFile}.new`, 'token-2');
    await rename(`${tokenFile}.new`, tokenFile);
    expect(await t.request('GET', path, undefined)).toMatchObject({ spec: { holderIdentity: 'a' } });
    expect(fake!.requests.at(-1)?.authorization).toBe('Bearer token-2');
    t.close();
    kube.close();
  });

  it('keeps the token while the file is unchanged, and names a missing file', async () => {
    const tokenFile = join(dir.path, 'stable-token');
    await writeFile(tokenFile, ' abc \n');
    const tf = new TokenFile(tokenFile);
    expect(tf.token()).toBe('abc');
    expect(tf.token()).toBe('abc');
    expect(() => new TokenFile(join(dir.path, 'gone')).token()).toThrow(/token file .*gone cannot be read/);
  });
});

describe('Status errors', () => {
  it('a 404 Status becomes E_KUBE_NOT_FOUND with the apiserver message and the request named', async () => {
    const kube = await createKubeClient({ kind: 'server', server: fake!.url, token: 'token-2' });
    const err = await kube.coordination.readNamespacedLease({ namespace: NS, name: 'nope' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KubeStatusError);
    const e = toKubeError(err, 'get lease x/nope');
    expect(e.code).toBe('E_KUBE_NOT_FOUND');
    expect(e.status).toBe(404);
    expect(e.message).toBe('get lease x/nope: leases.coordination.k8s.io "nope" not found (HTTP 404)');
    kube.close();
  });

  it.each([
    [409, '{"kind":"Status","message":"the object has been modified"}', 'E_KUBE_CONFLICT', 'x: the object has been modified (HTTP 409)'],
    [403, '{"kind":"Status","message":"forbidden: no"}', 'E_KUBE_FORBIDDEN', 'x: forbidden: no (HTTP 403)'],
    [401, '', 'E_KUBE_FORBIDDEN', 'x: HTTP 401 (HTTP 401)'],
    [503, 'upstream connect error', 'E_KUBE_REQUEST', 'x: upstream connect error (HTTP 503)'],
    [504, '{"message":"timeout"}', 'E_KUBE_TIMEOUT', 'x: timeout (HTTP 504)'],
  ])('HTTP %i', (status, body, code, message) => {
    const e = toKubeError(new KubeStatusError(status, body), 'x');
    expect([e.code, e.message, e.status]).toEqual([code, message, status]);
  });

  it('keeps the Status reason and details, which tell a missing object from a resource that is not served', () => {
    const object = toKubeError(
      new KubeStatusError(
        404,
        '{"kind":"Status","status":"Failure","message":"etcdmembers.druid.gardener.cloud \\"m\\" not found","reason":"NotFound","details":{"name":"m","group":"druid.gardener.cloud","kind":"etcdmembers"},"code":404}',
      ),
      'x',
    );
    expect(object.apiStatus).toEqual({ reason: 'NotFound', details: { name: 'm', group: 'druid.gardener.cloud', kind: 'etcdmembers' } });
    expect(isResourceNotServed(object)).toBe(false);
    const path = toKubeError(
      new KubeStatusError(
        404,
        '{"kind":"Status","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}',
      ),
      'x',
    );
    expect(path.apiStatus).toEqual({ reason: 'NotFound', details: {} });
    expect(isResourceNotServed(path)).toBe(true);
    // Not a Status (a proxy's page): no reason to go by, so not taken for "not served".
    const proxy = toKubeError(new KubeStatusError(404, '404 page not found'), 'x');
    expect(proxy.apiStatus).toBeUndefined();
    expect(isResourceNotServed(proxy)).toBe(false);
  });
});

describe('a misbehaving server', () => {
  let server: http.Server;
  let url: string;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      if (req.url === '/big') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`"${'x'.repeat(2048)}"`);
      }
      // any other path: never answer
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('a request without an answer ends with E_KUBE_TIMEOUT after the request timeout', async () => {
    const t = new KubeTransport({ server: url, requestTimeoutMs: 200 });
    const err = await t.request('GET', '/hang', undefined).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_TIMEOUT')).toBe(true);
    expect((err as Error).message).toMatch(/GET \/hang did not finish within 0.2 s/);
    t.close();
  });

  it("the caller's abort signal ends the request with its reason", async () => {
    const t = new KubeTransport({ server: url });
    const ac = new AbortController();
    const pending = t.request('GET', '/hang', undefined, { signal: ac.signal }).catch((e: unknown) => e);
    const reason = new Error('deadline');
    ac.abort(reason);
    expect(await pending).toBe(reason);
    expect(await t.request('GET', '/hang', undefined, { signal: ac.signal }).catch((e: unknown) => e)).toBe(reason);
    t.close();
  });

  it('an answer larger than the bound is refused', async () => {
    const t = new KubeTransport({ server: url, maxResponseBytes: 1024 });
    await expect(t.request('GET', '/big', undefined)).rejects.toThrow(/larger than 1024 bytes/);
    const roomy = new KubeTransport({ server: url, maxResponseBytes: 4096 });
    expect(await roomy.request('GET', '/big', undefined)).toHaveLength(2048);
    t.close();
    roomy.close();
  });
});
