/**
 * Opt-in API authentication with real TLS: mutual TLS against a test PKI (openssl), a bearer token file
 * that is re-read when it changes, probes open or closed by flag, and the default (nothing required).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildHttpServer } from '../../src/server/app.js';
import { HealthState } from '../../src/server/health.js';
import type { ApiAuthOptions } from '../../src/server/api-auth.js';
import { Metrics } from '../../src/metrics.js';
import { createTestPki, type TestPki } from '../support/certs.js';
import { httpsRequest, type ClientCert } from '../support/https.js';
import { Resources, httpConfig, request, silentLogger } from './support.js';

const res = new Resources();
afterEach(() => res.cleanup());
let pki: TestPki;
beforeAll(async () => {
  pki = await createTestPki();
});
afterAll(() => pki?.cleanup());

async function serve(auth: ApiAuthOptions | undefined, tls: boolean): Promise<string> {
  const health = new HealthState();
  health.setHealthy(true);
  const server = await buildHttpServer({
    config: httpConfig(tls ? { serverCert: pki.server.certFile, serverKey: pki.server.keyFile } : {}),
    logger: silentLogger,
    metrics: new Metrics({ defaultMetrics: false }),
    health,
    snapshots: () => undefined,
    store: () => undefined,
    host: '127.0.0.1',
    ...(auth ? { auth } : {}),
  });
  res.add(() => server.close());
  return (await server.listen()).url;
}

/** An https GET that trusts the test CA and presents `client` (a cert/key pair) if given. */
function get(url: string, client?: ClientCert, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return httpsRequest(url, { ca: readFileSync(pki.caFile), client, headers });
}

describe('API authentication', () => {
  it('mutual TLS: a client certificate of the CA is let in; none, or one of another CA, gets 401; probes stay open', async () => {
    const url = await serve({ clientCa: readFileSync(pki.caFile), openProbes: true }, true);
    expect((await get(`${url}/snapshot/latest`, pki.client)).status).toBe(405); // let in: no store, so 405
    const none = await get(`${url}/snapshot/latest`);
    expect(none.status).toBe(401);
    expect(none.body).toMatch(/client certificate signed by --api-client-ca-file/);
    expect((await get(`${url}/snapshot/latest`, pki.untrustedClient)).status).toBe(401);
    expect((await get(`${url}/initialization/status`)).status).toBe(401);
    expect((await get(`${url}/healthz`)).status).toBe(200);
    expect((await get(`${url}/metrics`)).status).toBe(200);
  });

  it('a bearer token file: the right token is let in, a wrong or missing one gets 401; a rotated file is re-read', async () => {
    const tokenFile = join(await res.tmpDir(), 'token');
    writeFileSync(tokenFile, 'first-secret-token\n');
    const url = await serve({ tokenFile, openProbes: false }, false);
    const call = (token?: string) => request(`${url}/snapshot/full`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    expect((await call('first-secret-token')).status).toBe(405);
    const missing = await call();
    expect(missing.status).toBe(401);
    expect(missing.headers['www-authenticate']).toBe('Bearer');
    expect((await call('wrong')).status).toBe(401);
    // Probes closed by flag.
    expect((await request(`${url}/healthz`)).status).toBe(401);
    writeFileSync(tokenFile, 'second-secret-token-rotated\n');
    expect((await call('first-secret-token')).status).toBe(401);
    expect((await call('second-secret-token-rotated')).status).toBe(405);
  });

  it('both: either credential is enough', async () => {
    const tokenFile = join(await res.tmpDir(), 'token');
    writeFileSync(tokenFile, 'tok');
    const url = await serve({ clientCa: readFileSync(pki.caFile), tokenFile, openProbes: true }, true);
    expect((await get(`${url}/snapshot/delta`, pki.client)).status).toBe(405);
    expect((await get(`${url}/snapshot/delta`, undefined, { authorization: 'Bearer tok' })).status).toBe(405);
    const neither = await get(`${url}/snapshot/delta`);
    expect(neither.status).toBe(401);
    expect(neither.body).toMatch(/client certificate .* or "Authorization: Bearer <token>"/);
  });

  it('by default nothing is required, as upstream', async () => {
    const url = await serve(undefined, false);
    expect((await request(`${url}/snapshot/latest`)).status).toBe(405);
  });
});
