import { afterEach, describe, expect, it } from 'vitest';
import { connect } from 'node:net';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { Metrics } from '../../src/metrics.js';
import { buildHttpServer } from '../../src/server/app.js';
import { HealthState } from '../../src/server/health.js';
import { send } from '../../src/server/respond.js';
import { Routes } from '../../src/server/http-router.js';
import { EtcdbrError } from '../../src/errors.js';
import { Resources, fakeSnapshotter, httpConfig, localStore, request, saveSnapshot, silentLogger, snap, startServer } from './support.js';

const res = new Resources();
afterEach(() => res.cleanup());

const TEXT = 'text/plain; charset=utf-8';

/** One snapshot of each shape, saved in a real Local store. */
async function storeWithSnapshots(): Promise<SnapStore> {
  const store = await localStore(res);
  await saveSnapshot(store, snap('Full', 0, 100, 1_700_000_000));
  await saveSnapshot(store, snap('Incr', 101, 150, 1_700_000_100));
  await saveSnapshot(store, snap('Full', 0, 200, 1_700_000_200));
  await saveSnapshot(store, snap('Incr', 201, 250, 1_700_000_300));
  await saveSnapshot(store, snap('Incr', 251, 300, 1_700_000_400));
  return store;
}

describe('/healthz', () => {
  it('answers 503 {"health":false} until healthy, then 200 {"health":true}, and back', async () => {
    const { url, health } = await startServer(res);
    let a = await request(`${url}/healthz`);
    expect(a.status).toBe(503);
    expect(a.body).toBe('{"health":false}');
    expect(a.headers['content-type']).toBe(TEXT);
    expect(a.headers['content-length']).toBe('16');

    health.setHealthy(true);
    a = await request(`${url}/healthz`);
    expect(a.status).toBe(200);
    expect(a.body).toBe('{"health":true}');
    expect(a.headers['content-length']).toBe('15');
    expect(a.headers['transfer-encoding']).toBeUndefined();

    health.setHealthy(false);
    a = await request(`${url}/healthz`, { method: 'POST' });
    expect(a.status).toBe(503);
    expect(a.body).toBe('{"health":false}');
  });

  it('sends status line, headers and body in one TCP write', async () => {
    const { url } = await startServer(res);
    const { port } = new URL(url);
    // The first chunk the client sees already holds the whole body (what etcd-wrapper relies on).
    const first = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      });
      socket.once('data', (chunk: Buffer) => {
        resolve(chunk.toString('utf8'));
        socket.destroy();
      });
      socket.on('error', reject);
    });
    expect(first).toMatch(/^HTTP\/1\.1 503 /);
    expect(first).toMatch(/\r\ncontent-length: 16\r\n/i);
    expect(first.endsWith('\r\n\r\n{"health":false}')).toBe(true);
  });
});

describe('/snapshot/full', () => {
  const finals: Array<[string, boolean]> = [
    ['', false],
    ['?final=true', true],
    ['?final=false', false],
    ['?final=1', true],
    ['?final=0', false],
    ['?final=T', true],
    ['?final=FALSE', false],
    ['?final=True', true],
    ['?final=', false],
  ];
  it.each(finals)('parses %j as final=%s with Go ParseBool rules', async (query, expected) => {
    const ssr = fakeSnapshotter();
    const { url } = await startServer(res, { snapshots: () => ssr });
    const a = await request(`${url}/snapshot/full${query}`);
    expect(a.status).toBe(200);
    expect(ssr.fullCalls).toEqual([expected]);
    const body = JSON.parse(a.body) as Record<string, unknown>;
    expect(body['isFinal']).toBe(expected);
  });

  it('rejects a value ParseBool does not take with 400 naming parameter and value', async () => {
    const ssr = fakeSnapshotter();
    const { url } = await startServer(res, { snapshots: () => ssr });
    for (const bad of ['maybe', 'yes', 'tRUE', '2']) {
      const a = await request(`${url}/snapshot/full?final=${bad}`);
      expect(a.status).toBe(400);
      expect(a.body).toContain('"final"');
      expect(a.body).toContain(`"${bad}"`);
      expect(a.headers['content-type']).toBe(TEXT);
    }
    expect(ssr.fullCalls).toEqual([]);
  });

  it('answers the snapshot as upstream JSON, without trailing newline', async () => {
    const ssr = fakeSnapshotter();
    const { url } = await startServer(res, { snapshots: () => ssr });
    const a = await request(`${url}/snapshot/full?final=true`);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toBe(TEXT);
    expect(a.headers['content-length']).toBe(String(Buffer.byteLength(a.body)));
    expect(a.body).toBe(
      '{"createdOn":"2023-11-14T22:13:20Z","immutabilityExpriyTime":"0001-01-01T00:00:00Z","versionID":null,' +
        '"kind":"Full","snapDir":"","snapName":"Full-00000000-00000042-1700000000.gz.final","prefix":"",' +
        '"compressionSuffix":".gz","startRevision":0,"lastRevision":42,"isChunk":false,"isFinal":true}',
    );
  });

  it('answers 500 with the snapshotter error', async () => {
    const ssr = fakeSnapshotter({
      full: async () => {
        throw new Error('snapshotter is not active');
      },
    });
    const { url } = await startServer(res, { snapshots: () => ssr });
    const a = await request(`${url}/snapshot/full`);
    expect(a.status).toBe(500);
    expect(a.body).toContain('snapshotter is not active');
  });

  it('takes GET, POST (with and without body) and PUT alike', async () => {
    const ssr = fakeSnapshotter();
    const { url } = await startServer(res, { snapshots: () => ssr });
    expect((await request(`${url}/snapshot/full`, { method: 'GET' })).status).toBe(200);
    expect((await request(`${url}/snapshot/full`, { method: 'POST' })).status).toBe(200);
    const withBody = await request(`${url}/snapshot/full?final=1`, {
      method: 'POST',
      body: '{"ignored":true}',
      headers: { 'content-type': 'application/json' },
    });
    expect(withBody.status).toBe(200);
    expect((await request(`${url}/snapshot/full`, { method: 'PUT', body: 'x' })).status).toBe(200);
    expect(ssr.fullCalls).toEqual([false, false, true, false]);
  });
});

describe('/snapshot/delta', () => {
  it('answers literal null when there were no events', async () => {
    const ssr = fakeSnapshotter();
    const { url } = await startServer(res, { snapshots: () => ssr });
    const a = await request(`${url}/snapshot/delta`, { method: 'POST' });
    expect(a.status).toBe(200);
    expect(a.body).toBe('null');
    expect(a.headers['content-length']).toBe('4');
    expect(ssr.deltaCalls).toBe(1);
  });

  it('answers the delta snapshot as JSON', async () => {
    const ssr = fakeSnapshotter({ delta: async () => snap('Incr', 43, 57, 1_700_000_060) });
    const { url } = await startServer(res, { snapshots: () => ssr });
    const a = await request(`${url}/snapshot/delta`);
    expect(a.status).toBe(200);
    expect(JSON.parse(a.body)).toEqual({
      createdOn: '2023-11-14T22:14:20Z',
      immutabilityExpriyTime: '0001-01-01T00:00:00Z',
      versionID: null,
      kind: 'Incr',
      snapDir: '',
      snapName: 'Incr-00000043-00000057-1700000060.gz',
      prefix: '',
      compressionSuffix: '.gz',
      startRevision: 43,
      lastRevision: 57,
      isChunk: false,
      isFinal: false,
    });
  });

  it('answers 500 when deltas are disabled', async () => {
    const ssr = fakeSnapshotter({
      delta: async () => {
        throw new Error('found delta snapshot interval 0s less than 1 second. Delta snapshotting is disabled.');
      },
    });
    const { url } = await startServer(res, { snapshots: () => ssr });
    const a = await request(`${url}/snapshot/delta`);
    expect(a.status).toBe(500);
    expect(a.body).toContain('Delta snapshotting is disabled.');
  });
});

describe('/snapshot/latest', () => {
  it('lists the newest full and the deltas after it from the store', async () => {
    const store = await storeWithSnapshots();
    const { url, metrics } = await startServer(res, { snapshots: () => fakeSnapshotter(), store: () => store });
    const a = await request(`${url}/snapshot/latest`);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(Object.keys(JSON.parse(a.body) as object)).toEqual(['fullSnapshot', 'deltaSnapshots']);
    const body = JSON.parse(a.body) as {
      fullSnapshot: Record<string, unknown>;
      deltaSnapshots: Array<Record<string, unknown>>;
    };
    expect(Object.keys(body.fullSnapshot)).toEqual([
      'createdOn',
      'immutabilityExpriyTime',
      'versionID',
      'kind',
      'snapDir',
      'snapName',
      'prefix',
      'compressionSuffix',
      'startRevision',
      'lastRevision',
      'isChunk',
      'isFinal',
    ]);
    expect(body.fullSnapshot).toMatchObject({
      kind: 'Full',
      snapName: 'Full-00000000-00000200-1700000200.gz',
      prefix: 'v2/',
      createdOn: '2023-11-14T22:16:40Z',
      immutabilityExpriyTime: '0001-01-01T00:00:00Z',
      versionID: null,
      lastRevision: 200,
    });
    expect(body.deltaSnapshots.map((d) => d['snapName'])).toEqual([
      'Incr-00000201-00000250-1700000300.gz',
      'Incr-00000251-00000300-1700000400.gz',
    ]);
    // Upstream updates these gauges while computing the answer.
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^etcdbr_snapstore_latest_deltas_total 2$/m);
    expect(text).toMatch(/^etcdbr_snapstore_latest_deltas_revisions_total 99$/m);
  });

  it('answers nulls for an empty store, as Go marshals nil', async () => {
    const store = await localStore(res);
    const { url } = await startServer(res, { snapshots: () => fakeSnapshotter(), store: () => store });
    const a = await request(`${url}/snapshot/latest`);
    expect(a.status).toBe(200);
    expect(a.body).toBe('{"fullSnapshot":null,"deltaSnapshots":null}');
  });

  it('answers deltas with a null full when there is no full snapshot', async () => {
    const store = await localStore(res);
    await saveSnapshot(store, snap('Incr', 1, 10, 1_700_000_000));
    const { url } = await startServer(res, { snapshots: () => fakeSnapshotter(), store: () => store });
    const body = JSON.parse((await request(`${url}/snapshot/latest`)).body) as {
      fullSnapshot: unknown;
      deltaSnapshots: Array<{ snapName: string }>;
    };
    expect(body.fullSnapshot).toBeNull();
    expect(body.deltaSnapshots.map((d) => d.snapName)).toEqual(['Incr-00000001-00000010-1700000000.gz']);
  });

  it('answers 500 when the store fails', async () => {
    const store = await localStore(res);
    const failing: SnapStore = Object.assign(Object.create(store) as SnapStore, {
      list: async () => {
        throw new Error('bucket is gone');
      },
    });
    const { url } = await startServer(res, { snapshots: () => fakeSnapshotter(), store: () => failing });
    const a = await request(`${url}/snapshot/latest`);
    expect(a.status).toBe(500);
    expect(a.body).toContain('bucket is gone');
  });
});

describe('without a snapshotter', () => {
  it.each(['/snapshot/full', '/snapshot/delta', '/snapshot/latest'])('%s answers 405 when no store is configured', async (path) => {
    const { url } = await startServer(res);
    for (const method of ['GET', 'POST']) {
      const a = await request(`${url}${path}`, { method });
      expect(a.status).toBe(405);
      expect(a.body).toContain('no snapshotter');
      expect(a.headers['content-length']).toBe(String(Buffer.byteLength(a.body)));
    }
  });

  it.each(['/snapshot/full', '/snapshot/delta', '/snapshot/latest'])(
    '%s answers 503 (not 405, which means no store) when a store is configured but the leader cannot be found',
    async (path) => {
      const store = await localStore(res);
      const { url } = await startServer(res, { store: () => store });
      const a = await request(`${url}${path}`);
      expect(a.status).toBe(503);
      expect(a.body).toContain('leading sidecar');
    },
  );
});

describe('other routes', () => {
  it('serves Prometheus metrics with the registry content type', async () => {
    const { url } = await startServer(res);
    const a = await request(`${url}/metrics`);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(a.body).toContain('etcdbr_snapshot_gc_total{kind="Full",succeeded="true"} 0');
  });

  it("answers unknown routes with Go's 404 text", async () => {
    const { url } = await startServer(res);
    for (const path of ['/nope', '/snapshot', '/snapshot/full/', '/members', '/debug/pprof/']) {
      const a = await request(`${url}${path}`);
      expect(a.status, path).toBe(404);
      expect(a.body).toBe('404 page not found\n');
    }
  });

  it('reads the path as Go does: escapes decoded, a malformed escape is a 400', async () => {
    const { url } = await startServer(res);
    const escaped = await request(`${url}/heal%74hz`);
    expect(escaped.status).toBe(503);
    expect(escaped.body).toBe('{"health":false}');
    const malformed = await request(`${url}/%zz`);
    expect(malformed.status).toBe(400);
    expect(malformed.body).toBe('invalid URL escape in "/%zz"\n');
  });

  it('answers HEAD with the headers of GET and no body', async () => {
    const { url } = await startServer(res);
    const a = await request(`${url}/healthz`, { method: 'HEAD' });
    expect(a.status).toBe(503);
    expect(a.headers['content-length']).toBe('16');
    expect(a.body).toBe('');
  });

  it('ignores request bodies, as Go: a malformed JSON or unknown body type changes nothing', async () => {
    const { url } = await startServer(res);
    for (const type of ['application/json', 'application/x-unknown']) {
      const a = await request(`${url}/healthz`, { method: 'POST', body: '{', headers: { 'content-type': type } });
      expect(a.status, type).toBe(503);
      expect(a.body, type).toBe('{"health":false}');
    }
  });

  it("turns a handler's typed error into its status and message", async () => {
    const { url } = await startServer(res, {
      extraRoutes: (routes) => {
        routes.all('/bad', async () => {
          throw new EtcdbrError('E_INVALID_INPUT', 'the request names no member');
        });
        routes.all('/broken', async () => {
          throw new EtcdbrError('E_INTERNAL', 'an invariant broke');
        });
      },
    });
    const bad = await request(`${url}/bad`);
    expect([bad.status, bad.body]).toEqual([400, 'the request names no member\n']);
    const broken = await request(`${url}/broken`);
    expect([broken.status, broken.body]).toEqual([500, 'an invariant broke\n']);
  });

  it('refuses a route registered twice', () => {
    const routes = new Routes();
    routes.all('/x', async () => undefined);
    expect(() => routes.all('/x', async () => undefined)).toThrow('route /x is registered twice');
  });

  it("listens on all interfaces by default, as upstream's :<port>", async () => {
    const { url } = await startServer(res, { host: undefined });
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await request(`${url}/healthz`)).status).toBe(503);
  });

  it('lets the caller add routes', async () => {
    const { url } = await startServer(res, {
      extraRoutes: (app) => {
        app.all('/initialization/status', async (x) => send(x.res, 200, 'text/plain; charset=utf-8', 'New'));
      },
    });
    const a = await request(`${url}/initialization/status`);
    expect(a.status).toBe(200);
    expect(a.body).toBe('New');
    expect(a.headers['content-length']).toBe('3');
  });
});

describe('listening', () => {
  it('a port in use is an error naming --server-port', async () => {
    const first = await startServer(res);
    const port = Number(new URL(first.url).port);
    const second = await buildHttpServer({
      config: httpConfig({ port }),
      logger: silentLogger,
      snapshots: () => undefined,
      store: () => undefined,
      host: '127.0.0.1',
      health: new HealthState(),
      metrics: new Metrics({ defaultMetrics: false }),
    });
    res.add(() => second.close());
    await expect(second.listen()).rejects.toMatchObject({
      code: 'E_CONFLICT',
      message: `cannot listen on 127.0.0.1 port ${port}: another process uses it; choose another --server-port or stop that process`,
    });
  });
});
