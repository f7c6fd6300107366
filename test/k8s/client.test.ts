/** Building the Kubernetes client: explicit server, kubeconfig files, in-cluster service account over TLS. */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKubeClient, resolveKubeConnection, SERVICE_ACCOUNT_DIR } from '../../src/k8s/client.js';
import { isKubeError, toKubeError } from '../../src/k8s/errors.js';
import { FakeKubeApiServer } from '../support/fake-kube.js';
import { seedLease, selfSignedCert, tempDir, type TempDir } from './support.js';

const NS = 'shoot--dev--one';
let dir: TempDir;
let plain: FakeKubeApiServer | undefined;
let secured: FakeKubeApiServer | undefined;
let certFile: string;

beforeAll(async () => {
  dir = await tempDir();
  plain = await FakeKubeApiServer.start({ token: 'plain-token' });
  const tls = await selfSignedCert(dir.path);
  certFile = tls.certFile;
  secured = await FakeKubeApiServer.start({ token: 'sa-token', tls: { cert: tls.cert, key: tls.key } });
  seedLease(plain, NS, 'lease-a', { holderIdentity: 'a' });
  seedLease(secured, NS, 'lease-b', { holderIdentity: 'b' });
});
afterAll(async () => {
  await plain?.stop();
  await secured?.stop();
  await dir?.remove();
});

describe('createKubeClient', () => {
  it('explicit server URL with a token (plain http)', async () => {
    const kube = await createKubeClient({ kind: 'server', server: `${plain!.url}/`, token: 'plain-token' });
    expect(kube.server).toBe(plain!.url);
    const lease = await kube.coordination.readNamespacedLease({ name: 'lease-a', namespace: NS });
    expect(lease.spec?.holderIdentity).toBe('a');
    expect(plain!.requests.at(-1)?.authorization).toBe('Bearer plain-token');
  });

  it('names itself on every request: User-Agent etcdbrctl/<package version>, however it connects', async () => {
    const version = (JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
    const file = join(dir.path, 'ua-kubeconfig');
    await writeFile(file, secured!.kubeconfig());
    for (const kube of [
      await createKubeClient({ kind: 'server', server: plain!.url, token: 'plain-token' }),
      await createKubeClient({ kind: 'kubeconfig', paths: [file] }),
    ]) {
      const fake = kube.server === plain!.url ? plain! : secured!;
      const before = fake.requests.length;
      await kube.coordination.readNamespacedLease({ name: fake === plain ? 'lease-a' : 'lease-b', namespace: NS });
      await kube.coordination
        .patchNamespacedLease({ name: 'missing', namespace: NS, body: { spec: {} } }, { contentType: 'application/merge-patch+json' })
        .catch(() => undefined);
      const sent = fake.requests.slice(before);
      expect(sent).toHaveLength(2);
      for (const r of sent) expect(r.userAgent).toBe(`etcdbrctl/${version}`);
      kube.close();
    }
  });

  it('kubeconfig file: context namespace, token, and an explicit context', async () => {
    const file = join(dir.path, 'kubeconfig');
    await writeFile(file, plain!.kubeconfig({ namespace: NS }));
    const kube = await createKubeClient({ kind: 'kubeconfig', paths: [file] });
    expect(kube.defaultNamespace).toBe(NS);
    const lease = await kube.coordination.readNamespacedLease({ name: 'lease-a', namespace: NS });
    expect(lease.spec?.holderIdentity).toBe('a');

    await expect(createKubeClient({ kind: 'kubeconfig', paths: [file], context: 'nope' })).rejects.toThrow(/has no context "nope"/);
  });

  it('kubeconfig with a plain http:// server and no insecure-skip-tls-verify (as users write it): accepted, as client-go does', async () => {
    const file = join(dir.path, 'kubeconfig-http');
    await writeFile(file, plain!.kubeconfig({ namespace: NS }));
    expect(await readFile(file, 'utf8')).not.toContain('insecure-skip-tls-verify');
    const kube = await createKubeClient({ kind: 'kubeconfig', paths: [file] });
    const lease = await kube.coordination.readNamespacedLease({ name: 'lease-a', namespace: NS });
    expect(lease.spec?.holderIdentity).toBe('a');
  });

  it('kubeconfig with a proxy-url is refused, naming the file and the cluster (the sidecar reaches the API server directly)', async () => {
    const file = join(dir.path, 'kubeconfig-http-proxy');
    const config = JSON.parse(plain!.kubeconfig({ namespace: NS })) as { clusters: Array<{ cluster: Record<string, unknown> }> };
    config.clusters[0]!.cluster['proxy-url'] = 'https://proxy.example:3128';
    await writeFile(file, JSON.stringify(config));
    const err = await createKubeClient({ kind: 'kubeconfig', paths: [file] }).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_CONFIG')).toBe(true);
    expect((err as Error).message).toContain(file);
    expect((err as Error).message).toMatch(/cluster "fake" uses proxy-url/);
  });

  it('kubeconfig with insecure-skip-tls-verify: plain http and an https server with an untrusted certificate', async () => {
    const httpFile = join(dir.path, 'kubeconfig-http-insecure');
    await writeFile(httpFile, plain!.kubeconfig({ insecureSkipTlsVerify: true }));
    const overHttp = await createKubeClient({ kind: 'kubeconfig', paths: [httpFile] });
    expect((await overHttp.coordination.readNamespacedLease({ name: 'lease-a', namespace: NS })).spec?.holderIdentity).toBe('a');

    const httpsFile = join(dir.path, 'kubeconfig-https-insecure');
    await writeFile(httpsFile, secured!.kubeconfig({ insecureSkipTlsVerify: true }));
    const overTls = await createKubeClient({ kind: 'kubeconfig', paths: [httpsFile] });
    expect(overTls.verifiesTLS).toBe(false);
    expect((await overTls.coordination.readNamespacedLease({ name: 'lease-b', namespace: NS })).spec?.holderIdentity).toBe('b');
  });

  it('kubeconfig over https keeps verifying the server certificate: no CA and no insecure flag is refused', async () => {
    const file = join(dir.path, 'kubeconfig-https-unverified');
    const config = JSON.parse(secured!.kubeconfig()) as { clusters: Array<{ cluster: Record<string, unknown> }> };
    delete config.clusters[0]!.cluster['certificate-authority-data'];
    await writeFile(file, JSON.stringify(config));
    const kube = await createKubeClient({ kind: 'kubeconfig', paths: [file] });
    const err = await kube.coordination.readNamespacedLease({ name: 'lease-b', namespace: NS }).catch((e: unknown) => e);
    // The TLS error surfaces as a transport error; toKubeError names its chain.
    const kubeErr = toKubeError(err, 'get lease');
    expect(kubeErr.code).toBe('E_KUBE_UNREACHABLE');
    expect(kubeErr.message).toMatch(/self[- ]signed|certificate/i);
  });

  it('several kubeconfig files merge first-wins (KUBECONFIG list)', async () => {
    const first = join(dir.path, 'first');
    const second = join(dir.path, 'second');
    // Both files name their cluster, user and context "fake": client-go keeps the first definition.
    await writeFile(first, plain!.kubeconfig());
    await writeFile(second, secured!.kubeconfig());
    const kube = await createKubeClient({ kind: 'kubeconfig', paths: [first, second] });
    expect(kube.server).toBe(plain!.url);
  });

  it('in-cluster: https with the service account CA, token file and namespace file', async () => {
    const sa = join(dir.path, 'sa');
    await mkdir(sa);
    await writeFile(join(sa, 'token'), 'sa-token');
    await writeFile(join(sa, 'namespace'), `${NS}\n`);
    const port = new URL(secured!.url).port;
    const kube = await createKubeClient({
      kind: 'in-cluster',
      host: '127.0.0.1',
      port,
      tokenFile: join(sa, 'token'),
      caFile: certFile,
      namespaceFile: join(sa, 'namespace'),
    });
    expect(kube.server).toBe(`https://127.0.0.1:${port}`);
    expect(kube.defaultNamespace).toBe(NS);
    const lease = await kube.coordination.readNamespacedLease({ name: 'lease-b', namespace: NS });
    expect(lease.spec?.holderIdentity).toBe('b');
    expect(secured!.requests.at(-1)?.authorization).toBe('Bearer sa-token');
  });

  it('in-cluster without a mounted token is a configuration error naming the file', async () => {
    const err = await createKubeClient({
      kind: 'in-cluster',
      host: '10.0.0.1',
      port: '443',
      tokenFile: join(dir.path, 'missing-token'),
      caFile: certFile,
    }).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_CONFIG')).toBe(true);
    expect((err as Error).message).toContain('missing-token');
  });

  it('rejects a server that is not an http(s) URL', async () => {
    await expect(createKubeClient({ kind: 'server', server: 'not a url' })).rejects.toThrow(/is not a URL/);
    await expect(createKubeClient({ kind: 'server', server: 'ftp://x' })).rejects.toThrow(/http or https/);
  });
});

describe('resolveKubeConnection (controller-runtime GetConfig order)', () => {
  const token = join(SERVICE_ACCOUNT_DIR, 'token');
  const fs =
    (...files: string[]) =>
    (f: string) =>
      files.includes(f);
  const inCluster = { KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443', HOME: '/home/me', KUBECONFIG: '/k/a:/k/b' };

  it('explicit kubeconfig first, then KUBECONFIG, then in-cluster, then ~/.kube/config', () => {
    expect(resolveKubeConnection({ kubeconfig: '/x', env: inCluster, exists: fs('/x', '/k/a', token) })).toEqual({
      kind: 'kubeconfig',
      paths: ['/x'],
    });
    expect(resolveKubeConnection({ env: inCluster, exists: fs('/k/b', token) })).toEqual({ kind: 'kubeconfig', paths: ['/k/b'] });
    expect(resolveKubeConnection({ env: { ...inCluster, KUBECONFIG: '' }, exists: fs(token, '/home/me/.kube/config') })).toEqual({
      kind: 'in-cluster',
      host: '10.0.0.1',
      port: '443',
    });
    expect(resolveKubeConnection({ env: { ...inCluster, KUBECONFIG: '' }, exists: fs('/home/me/.kube/config') })).toEqual({
      kind: 'kubeconfig',
      paths: ['/home/me/.kube/config'],
    });
  });

  it('says what is missing when nothing is found', () => {
    expect(() => resolveKubeConnection({ kubeconfig: '/x', env: {}, exists: fs() })).toThrow(/kubeconfig \/x does not exist/);
    expect(() => resolveKubeConnection({ env: { KUBECONFIG: '/k/a' }, exists: fs() })).toThrow(/none of the KUBECONFIG files exist/);
    expect(() => resolveKubeConnection({ env: {}, exists: fs() })).toThrow(/no Kubernetes configuration found/);
  });
});
