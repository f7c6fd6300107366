import { afterEach, describe, expect, it } from 'vitest';
import { HealthState } from '../../src/server/health.js';
import { Resources, fakeSnapshotter, httpConfig, localStore, request, selfSigned, startServer } from './support.js';

const res = new Resources();
afterEach(() => res.cleanup());

const HSTS = 'max-age=31536000';
const CSP = "default-src 'self'";

describe('TLS mode', () => {
  it('serves HTTPS and sets the security headers on API routes, not on metrics and debug', async () => {
    const tls = await selfSigned(res);
    const config = httpConfig({ serverCert: tls.certFile, serverKey: tls.keyFile, enableProfiling: true });
    const { url } = await startServer(res, { config, snapshots: () => fakeSnapshotter() });
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);

    for (const path of ['/healthz', '/snapshot/full', '/snapshot/delta', '/snapshot/full?final=maybe']) {
      const a = await request(`${url}${path}`, { ca: tls.cert });
      expect(a.headers['strict-transport-security'], path).toBe(HSTS);
      expect(a.headers['content-security-policy'], path).toBe(CSP);
    }
    for (const path of ['/metrics', '/debug/pprof/']) {
      const a = await request(`${url}${path}`, { ca: tls.cert });
      expect(a.status, path).toBe(200);
      expect(a.headers['strict-transport-security'], path).toBeUndefined();
      expect(a.headers['content-security-policy'], path).toBeUndefined();
    }
  });

  it('sets no security headers without TLS', async () => {
    const { url } = await startServer(res);
    const a = await request(`${url}/healthz`);
    expect(a.headers['strict-transport-security']).toBeUndefined();
    expect(a.headers['content-security-policy']).toBeUndefined();
  });

  it('stays plain HTTP when only one of cert and key is set', async () => {
    const tls = await selfSigned(res);
    const { url } = await startServer(res, { config: httpConfig({ serverCert: tls.certFile }) });
    expect(url).toMatch(/^http:\/\//);
    expect((await request(`${url}/healthz`)).status).toBe(503);
  });

  it('fails to build with a message naming an unreadable cert file', async () => {
    const dir = await res.tmpDir();
    await expect(
      startServer(res, { config: httpConfig({ serverCert: `${dir}/missing.crt`, serverKey: `${dir}/missing.key` }) }),
    ).rejects.toThrow(/missing\.crt/);
  });

  it('forwards to a TLS leader trusting the given CA, and refuses leaders it cannot verify', async () => {
    const tls = await selfSigned(res);
    const config = httpConfig({ serverCert: tls.certFile, serverKey: tls.keyFile });
    const store = await localStore(res);
    const leaderHealth = new HealthState();
    leaderHealth.setHealthy(true);
    const ssr = fakeSnapshotter();
    const leader = await startServer(res, { config, health: leaderHealth, snapshots: () => ssr, store: () => store });

    const trusting = await startServer(res, {
      config,
      store: () => store,
      proxyCa: tls.cert,
      leaderProxy: { findLeaderUrl: async () => leader.url },
    });
    const a = await request(`${trusting.url}/snapshot/full?final=1`, { ca: tls.cert });
    expect(a.status).toBe(200);
    expect(JSON.parse(a.body)).toMatchObject({ kind: 'Full', isFinal: true });
    expect(a.headers['strict-transport-security']).toBe(HSTS);

    const untrusting = await startServer(res, {
      config,
      store: () => store,
      leaderProxy: { findLeaderUrl: async () => leader.url },
    });
    const b = await request(`${untrusting.url}/snapshot/full`, { ca: tls.cert });
    expect(b.status).toBe(503);
    expect(b.body).toMatch(/certificate/i);
    expect(ssr.fullCalls).toEqual([true]);
  });
});
