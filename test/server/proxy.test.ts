import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type IncomingMessage, type RequestListener, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Snapshot } from '@etcdbrctl/snapstore';
import { freePort } from '../../src/etcd/ports.js';
import { HealthState } from '../../src/server/health.js';
import { Resources, fakeSnapshotter, localStore, request, saveSnapshot, snap, startServer } from './support.js';

const res = new Resources();
afterEach(() => res.cleanup());

/** An HTTP server on a free loopback port, closed after the test. Returns its URL. */
async function startHttpServer(handler: RequestListener): Promise<string> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  res.add(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A stand-in leading sidecar: healthy on /healthz, every other request goes to `handle`. Returns its URL. */
function startFakeLeader(handle: (req: IncomingMessage, resp: ServerResponse) => void): Promise<string> {
  return startHttpServer((req, resp) => {
    if (req.url === '/healthz') {
      resp.end('{"health":true}');
      return;
    }
    handle(req, resp);
  });
}

/** A leading sidecar (snapshotter running, healthy) and a follower that knows where it is. */
async function leaderAndFollower(opts: { leaderHealthy?: boolean; full?: () => Promise<Snapshot> } = {}) {
  const store = await localStore(res);
  await saveSnapshot(store, snap('Full', 0, 10, 1_700_000_000));
  await saveSnapshot(store, snap('Incr', 11, 20, 1_700_000_010));
  const ssr = fakeSnapshotter({
    delta: async () => snap('Incr', 21, 30, 1_700_000_020),
    ...(opts.full ? { full: opts.full } : {}),
  });
  const leaderHealth = new HealthState();
  leaderHealth.setHealthy(opts.leaderHealthy ?? true);
  const leader = await startServer(res, { snapshots: () => ssr, store: () => store, health: leaderHealth });
  let lookups = 0;
  const follower = await startServer(res, {
    snapshots: () => undefined,
    store: () => store,
    leaderProxy: {
      async findLeaderUrl() {
        lookups++;
        return leader.url;
      },
    },
  });
  return { leader, follower, ssr, lookups: () => lookups };
}

describe('delegation to the leading sidecar', () => {
  it("answers /snapshot/full with the leader's answer, passing the query on", async () => {
    const { leader, follower, ssr } = await leaderAndFollower();
    const direct = await request(`${leader.url}/snapshot/full?final=true`);
    const viaFollower = await request(`${follower.url}/snapshot/full?final=true`);
    expect(viaFollower.status).toBe(200);
    expect(viaFollower.body).toBe(direct.body);
    expect(viaFollower.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(viaFollower.headers['content-length']).toBe(String(Buffer.byteLength(direct.body)));
    expect(ssr.fullCalls).toEqual([true, true]);
  });

  it('works for GET and POST, and forwards a POST body', async () => {
    const { follower, ssr } = await leaderAndFollower();
    const get = await request(`${follower.url}/snapshot/delta`);
    const post = await request(`${follower.url}/snapshot/delta`, {
      method: 'POST',
      body: 'some bytes',
      headers: { 'content-type': 'application/octet-stream' },
    });
    for (const a of [get, post]) {
      expect(a.status).toBe(200);
      expect(JSON.parse(a.body)).toMatchObject({ kind: 'Incr', snapName: 'Incr-00000021-00000030-1700000020.gz' });
    }
    expect(ssr.deltaCalls).toBe(2);
  });

  it('answers /snapshot/latest from the leader', async () => {
    const { follower } = await leaderAndFollower();
    const a = await request(`${follower.url}/snapshot/latest`);
    expect(a.status).toBe(200);
    const body = JSON.parse(a.body) as { fullSnapshot: { snapName: string }; deltaSnapshots: Array<{ snapName: string }> };
    expect(body.fullSnapshot.snapName).toBe('Full-00000000-00000010-1700000000.gz');
    expect(body.deltaSnapshots.map((d) => d.snapName)).toEqual(['Incr-00000011-00000020-1700000010.gz']);
  });

  it("relays the leader's errors unchanged", async () => {
    const { leader, follower } = await leaderAndFollower({
      full: async () => {
        throw new Error('etcd snapshot stream broke');
      },
    });
    const direct = await request(`${leader.url}/snapshot/full`);
    const a = await request(`${follower.url}/snapshot/full`);
    expect(a.status).toBe(500);
    expect(a.body).toBe(direct.body);
    expect(a.body).toContain('etcd snapshot stream broke');
  });

  it('rejects a bad final value itself, without asking the leader', async () => {
    const { follower, ssr, lookups } = await leaderAndFollower();
    const a = await request(`${follower.url}/snapshot/full?final=maybe`);
    expect(a.status).toBe(400);
    expect(a.body).toContain('"maybe"');
    expect(lookups()).toBe(0);
    expect(ssr.fullCalls).toEqual([]);
  });

  it('answers 503 without forwarding when the leader is unhealthy', async () => {
    const { follower, ssr } = await leaderAndFollower({ leaderHealthy: false });
    for (const path of ['/snapshot/full', '/snapshot/delta', '/snapshot/latest']) {
      const a = await request(`${follower.url}${path}`);
      expect(a.status).toBe(503);
      expect(a.body).toContain('not healthy');
    }
    expect(ssr.fullCalls).toEqual([]);
    expect(ssr.deltaCalls).toBe(0);
  });

  // Upstream answers 405 here, its answer for "no store": these are passing conditions, to retry.
  it('answers 503 when there is no leader, the lookup fails (etcd is down), or the leader is unreachable', async () => {
    const store = await localStore(res);
    const cases: Array<[() => Promise<string | undefined>, string]> = [
      [async () => undefined, 'no leading sidecar'],
      [
        async () => {
          throw new Error('etcd is down');
        },
        'etcd is down',
      ],
      // A port nobody listens on (taken and released).
      [async () => `http://127.0.0.1:${await freePort()}`, 'health of the leading sidecar'],
      [async () => 'not a url', 'health of the leading sidecar'],
    ];
    for (const [findLeaderUrl, expected] of cases) {
      const follower = await startServer(res, { store: () => store, leaderProxy: { findLeaderUrl } });
      for (const path of ['/snapshot/full', '/snapshot/latest']) {
        const a = await request(`${follower.url}${path}`);
        expect(a.status).toBe(503);
        expect(a.body).toContain(expected);
      }
    }
  });

  it("answers 503 when the leader's /healthz does not answer in time", async () => {
    const url = await startHttpServer(() => {
      // Never answers.
    });
    const store = await localStore(res);
    const follower = await startServer(res, {
      store: () => store,
      leaderProxy: { findLeaderUrl: async () => url },
      leaderHealthTimeoutMs: 300,
    });
    const a = await request(`${follower.url}/snapshot/delta`);
    expect(a.status).toBe(503);
    expect(a.body).toContain('no answer within 300 ms');
  });

  it('does not forward twice: a sidecar pointing at another follower stops the chain', async () => {
    const store = await localStore(res);
    // Two followers that each believe the other leads, both reporting healthy.
    let urlB = '';
    const healthy = new HealthState();
    healthy.setHealthy(true);
    const a = await startServer(res, { store: () => store, health: healthy, leaderProxy: { findLeaderUrl: async () => urlB } });
    const b = await startServer(res, { store: () => store, health: healthy, leaderProxy: { findLeaderUrl: async () => a.url } });
    urlB = b.url;
    const answer = await request(`${a.url}/snapshot/full`);
    expect(answer.status).toBe(503);
    expect(answer.body).toContain('already forwarded');
  });

  it('answers 502 when the leader goes away between health check and forwarding', async () => {
    // Healthy on /healthz, then drops the connection of the forwarded request.
    const url = await startFakeLeader((req) => req.socket.destroy());
    const store = await localStore(res);
    const follower = await startServer(res, { store: () => store, leaderProxy: { findLeaderUrl: async () => url } });
    const a = await request(`${follower.url}/snapshot/full`);
    expect(a.status).toBe(502);
    expect(a.body).toContain('forwarding the request to the leading sidecar');
  });

  it('forwards method, path, query and body unchanged', async () => {
    const seen: Array<{ method?: string; url?: string; body: string; headers: Record<string, unknown> }> = [];
    const url = await startFakeLeader((req, resp) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, body: Buffer.concat(chunks).toString('utf8'), headers: req.headers });
        resp.statusCode = 202;
        resp.setHeader('x-leader', 'yes');
        resp.end('accepted by leader');
      });
    });
    const store = await localStore(res);
    const follower = await startServer(res, { store: () => store, leaderProxy: { findLeaderUrl: async () => `${url}/` } });
    const a = await request(`${follower.url}/snapshot/full?final=true&x=1`, {
      method: 'POST',
      body: '{"a":1}',
      headers: { 'content-type': 'application/json' },
    });
    expect(a.status).toBe(202);
    expect(a.body).toBe('accepted by leader');
    expect(a.headers['x-leader']).toBe('yes');
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ method: 'POST', url: '/snapshot/full?final=true&x=1', body: '{"a":1}' });
    expect(seen[0]?.headers).toMatchObject({
      'content-type': 'application/json',
      'content-length': '7',
      'x-forwarded-for': '127.0.0.1',
    });
  });

  it('refuses to forward a body over 1 MiB with 413, declared or chunked, and forwards nothing', async () => {
    let forwarded = 0;
    const url = await startFakeLeader((_req, resp) => {
      forwarded++;
      resp.end('accepted by leader');
    });
    const store = await localStore(res);
    const follower = await startServer(res, { store: () => store, leaderProxy: { findLeaderUrl: async () => url } });
    const big = 'x'.repeat(1024 * 1024 + 1);
    const declared = await request(`${follower.url}/snapshot/delta`, { method: 'POST', body: big });
    const chunked = await request(`${follower.url}/snapshot/delta`, {
      method: 'POST',
      body: big,
      headers: { 'transfer-encoding': 'chunked' },
    });
    for (const a of [declared, chunked]) {
      expect(a.status).toBe(413);
      expect(a.body).toBe('not forwarded to the leading sidecar: the request body is larger than 1048576 bytes\n');
    }
    expect(forwarded).toBe(0);
    // Exactly the limit goes through.
    const atLimit = await request(`${follower.url}/snapshot/delta`, { method: 'POST', body: big.slice(1) });
    expect(atLimit.status).toBe(200);
    expect(forwarded).toBe(1);
  });

  it('streams large answers from the leader', async () => {
    const big = 'x'.repeat(3 * 1024 * 1024);
    const url = await startFakeLeader((_req, resp) => {
      // Chunked, no Content-Length: relayed as a stream.
      resp.setHeader('content-type', 'application/octet-stream');
      resp.write(big.slice(0, 1024));
      resp.end(big.slice(1024));
    });
    const store = await localStore(res);
    const follower = await startServer(res, { store: () => store, leaderProxy: { findLeaderUrl: async () => url } });
    const a = await request(`${follower.url}/snapshot/latest`);
    expect(a.status).toBe(200);
    expect(a.body.length).toBe(big.length);
    expect(a.headers['content-type']).toBe('application/octet-stream');
  });
});
