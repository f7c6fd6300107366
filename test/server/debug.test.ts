import { afterEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { waitFor } from '../support/wait.js';
import { Resources, httpConfig, request, startServer } from './support.js';

const res = new Resources();
afterEach(() => res.cleanup());

describe('profiling routes', () => {
  it('are absent by default', async () => {
    const { url } = await startServer(res);
    for (const path of ['/debug/pprof', '/debug/pprof/', '/debug/pprof/heap', '/debug/pprof/profile?seconds=1']) {
      expect((await request(`${url}${path}`)).status, path).toBe(404);
    }
  });

  it('serve an index, and redirect the bare prefix to it', async () => {
    const { url } = await startServer(res, { config: httpConfig({ enableProfiling: true }) });
    const index = await request(`${url}/debug/pprof/`);
    expect(index.status).toBe(200);
    expect(index.body).toContain('/debug/pprof/heap');
    expect(index.body).toContain('/debug/pprof/profile?seconds=N');
    const bare = await request(`${url}/debug/pprof`);
    expect(bare.status).toBe(301);
    expect(bare.headers.location).toBe('/debug/pprof/');
  });

  it('take a CPU profile for the requested seconds', async () => {
    const { url } = await startServer(res, { config: httpConfig({ enableProfiling: true }) });
    const a = await request(`${url}/debug/pprof/profile?seconds=1`);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(a.headers['content-disposition']).toMatch(/^attachment; filename="cpu-.*\.cpuprofile"$/);
    const profile = JSON.parse(a.body) as { nodes: unknown[]; startTime: number; endTime: number };
    expect(Array.isArray(profile.nodes)).toBe(true);
    expect(profile.nodes.length).toBeGreaterThan(0);
    // The profile's own clock (V8's, in µs) says it sampled for the requested second.
    expect(profile.endTime - profile.startTime).toBeGreaterThanOrEqual(900_000);
  });

  it('reject seconds outside 1..60 with 400', async () => {
    const { url } = await startServer(res, { config: httpConfig({ enableProfiling: true }) });
    for (const bad of ['0', '61', '-1', '1.5', 'abc', '1000']) {
      const a = await request(`${url}/debug/pprof/profile?seconds=${bad}`);
      expect(a.status, bad).toBe(400);
      expect(a.body).toContain('"seconds"');
    }
  });

  it('allow one CPU profile at a time, and end it early when the server closes', async () => {
    let logged = '';
    const logger = pino(
      { level: 'info' },
      new Writable({ write: (chunk: Buffer, _enc, done) => void ((logged += chunk.toString()), done()) }),
    );
    const { url, server } = await startServer(res, { config: httpConfig({ enableProfiling: true }), logger });
    const long = request(`${url}/debug/pprof/profile?seconds=60`);
    await waitFor(() => logged.includes('taking a V8 CPU profile for /debug/pprof/profile'), 'the first profile to start', 10_000, 10);
    const second = await request(`${url}/debug/pprof/profile?seconds=1`);
    expect(second.status).toBe(409);
    await server.close();
    // Closing answered the running request with what was sampled so far, well short of its 60 s.
    const first = await long;
    expect(first.status).toBe(200);
    const profile = JSON.parse(first.body) as { startTime: number; endTime: number };
    expect(profile.endTime - profile.startTime).toBeLessThan(30_000_000);
  });

  it('stream a V8 heap snapshot', async () => {
    const { url } = await startServer(res, { config: httpConfig({ enableProfiling: true }) });
    // Only the start is read: a whole snapshot of the test worker is large.
    const head = await new Promise<{ status: number; type?: string; start: string }>((resolve, reject) => {
      const req = http.get(`${url}/debug/pprof/heap`, { agent: false }, (resp) => {
        resp.once('data', (chunk: Buffer) => {
          resolve({ status: resp.statusCode ?? 0, type: resp.headers['content-type'], start: chunk.toString('utf8', 0, 64) });
          req.destroy();
        });
        resp.on('error', () => {});
      });
      req.on('error', reject);
    });
    expect(head.status).toBe(200);
    expect(head.type).toBe('application/json');
    expect(head.start).toMatch(/^\{"snapshot":/);
  });
});
