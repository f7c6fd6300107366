/**
 * Maintenance on demand sent to a follower: three etcd members on their own loopback addresses (127.0.0.1,
 * .2, .3) and three `etcdbrctl server` sidecars, each on its member's address and the same port, as pods
 * are. A follower forwards /maintenance/compact and /maintenance/defrag to the leading sidecar (found
 * from etcd's leader, as snapshot requests are); authentication is enforced by the follower before it
 * forwards and by the leader again; a forwarded request is never forwarded a second time.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/etcd/ports.js';
import { FORWARDED_HEADER } from '../src/server/proxy.js';
import { startTestCluster, type TestCluster } from '../test/support/cluster.js';
import { leaderName } from '../test/cluster/maintenance-support.js';
import { healthz, metricSum } from './support/multinode.js';
import { startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

const HOSTS = ['127.0.0.1', '127.0.0.2', '127.0.0.3'];
const TOKEN = 'maintenance-token';

/** Whether `port` can be bound on `host` right now. */
function canListen(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, host, () => s.close(() => resolve(true)));
  });
}

/** A port free on every one of `hosts`: the sidecars share it, each on its own address. */
async function portFreeOnAll(hosts: string[]): Promise<number> {
  for (;;) {
    const port = await freePort(hosts[0]);
    if ((await Promise.all(hosts.map((h) => canListen(port, h)))).every(Boolean)) return port;
  }
}

interface Answer {
  status: number;
  body: string;
}

async function call(url: string, opts: { method?: string; token?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const res = await fetch(url, {
    method: opts.method ?? 'POST',
    headers: { ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...opts.headers },
    signal: AbortSignal.timeout(120_000),
  });
  return { status: res.status, body: await res.text() };
}

async function maintenanceCount(sidecarUrl: string, operation: string): Promise<number> {
  const text = await (await fetch(`${sidecarUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  return metricSum(text, 'etcdbr_maintenance_duration_seconds_count', { operation });
}

const forwardedLines = (s: SidecarProcess): number =>
  s
    .logs()
    .split('\n')
    .filter((l) => l.includes('forwarding the request to the leading')).length;

describe('maintenance requests sent to a follower run on the leading sidecar', () => {
  let cluster: TestCluster | undefined;
  let dir = '';
  const sidecars: SidecarProcess[] = [];
  const tokenFiles: string[] = [];
  let leader = -1;
  let followers: number[] = [];
  let failed = false;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-maint-'));
    cluster = await startTestCluster(3, { hosts: HOSTS });
    const client = new Etcd3({ hosts: cluster.clientUrls() });
    try {
      for (let i = 0; i < 60; i++) await client.put(`/k/${i % 6}`).value('x'.repeat(2000));
    } finally {
      client.close();
    }
    const port = await portFreeOnAll(HOSTS);
    for (const [i, m] of cluster.members.entries()) {
      // One token file per sidecar, as each pod mounts its own copy of the secret.
      const tokenFile = join(dir, `token-${i}`);
      await writeFile(tokenFile, TOKEN);
      tokenFiles.push(tokenFile);
      sidecars.push(
        await startSidecar(
          [`--endpoints=${m.clientUrl}`, `--api-token-file=${tokenFile}`, '--reelection-period=1500ms', '--etcd-connection-timeout=5s'],
          // No POD_NAME: no peer URL check and no member cleanup; only the HTTP API is under test.
          { POD_NAME: '' },
          { host: m.host, port },
        ),
      );
    }
    const name = await leaderName(cluster);
    leader = cluster.members.findIndex((m) => m.name === name);
    followers = [0, 1, 2].filter((i) => i !== leader);
    // Forwarding waits for a healthy leading sidecar (with no store: once it leads).
    await waitFor(
      async () => ((await healthz(sidecars[leader]!.url)).status === 200 ? true : undefined),
      'leading sidecar healthy',
      60_000,
    );
  }, 180_000);

  afterAll(async () => {
    if (failed)
      for (const [i, s] of sidecars.entries()) process.stderr.write(`--- sidecar ${i} log (tail) ---\n${s.logs().slice(-6_000)}\n`);
    await Promise.all(sidecars.map((s) => s.stop()));
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a compaction and a defragmentation sent to followers run on the leader; GET on a follower shows its outcome', async () => {
    failed = true;
    const [f1, f2] = followers as [number, number];
    expect(await leaderName(cluster!), 'leadership stayed put').toBe(cluster!.members[leader]!.name);
    const compact = await call(`${sidecars[f1]!.url}/maintenance/compact?keep=10`, { token: TOKEN });
    expect(compact.status, compact.body).toBe(200);
    expect(JSON.parse(compact.body)).toMatchObject({ operation: 'compact', state: 'succeeded' });
    // It ran on the leader: its metrics count it, the follower's do not, and the follower logged the forward.
    expect(await maintenanceCount(sidecars[leader]!.url, 'compact')).toBe(1);
    expect(await maintenanceCount(sidecars[f1]!.url, 'compact')).toBe(0);
    expect(forwardedLines(sidecars[f1]!)).toBe(1);
    const status = await call(`${sidecars[f2]!.url}/maintenance/compact`, { method: 'GET', token: TOKEN });
    expect(status.status).toBe(200);
    expect(JSON.parse(status.body)).toEqual(JSON.parse(compact.body));

    const defrag = await call(`${sidecars[f2]!.url}/maintenance/defrag`, { token: TOKEN });
    expect(defrag.status, defrag.body).toBe(200);
    const outcome = JSON.parse(defrag.body) as { state: string; detail: string };
    expect(outcome.state).toBe('succeeded');
    const order = /defragmented (.*) \(in this order\)/.exec(outcome.detail)![1]!.split(', ');
    expect(order).toHaveLength(3);
    expect(order.at(-1)).toBe(cluster!.members[leader]!.name);
    expect(await maintenanceCount(sidecars[leader]!.url, 'defrag')).toBe(1);
    expect(await maintenanceCount(sidecars[f2]!.url, 'defrag')).toBe(0);
    failed = false;
  }, 180_000);

  it('authentication: the follower refuses before forwarding, and the leader checks the forwarded request again', async () => {
    failed = true;
    const f = followers[0]!;
    const before = forwardedLines(sidecars[f]!);
    const none = await call(`${sidecars[f]!.url}/maintenance/compact?keep=10`);
    expect(none.status).toBe(401);
    const wrong = await call(`${sidecars[f]!.url}/maintenance/compact?keep=10`, { token: 'not-the-token' });
    expect(wrong.status).toBe(401);
    expect(forwardedLines(sidecars[f]!), 'refused requests are not forwarded').toBe(before);

    // The leader's secret is rotated and the follower's not yet: the follower lets the old token in and
    // forwards it, and the leader refuses it (its answer relayed), so forwarding bypasses nothing.
    await writeFile(tokenFiles[leader]!, 'rotated-token');
    try {
      const stale = await call(`${sidecars[f]!.url}/maintenance/compact?keep=10`, { token: TOKEN });
      expect(stale.status).toBe(401);
      expect(stale.body).toMatch(/unauthorized/);
      expect(forwardedLines(sidecars[f]!)).toBe(before + 1);
      expect(await maintenanceCount(sidecars[leader]!.url, 'compact')).toBe(1);
    } finally {
      await writeFile(tokenFiles[leader]!, TOKEN);
    }
    failed = false;
  }, 60_000);

  it('a forwarded request that reaches a follower is refused, not forwarded again', async () => {
    failed = true;
    const f = followers[0]!;
    const before = forwardedLines(sidecars[f]!);
    // What a sidecar with a stale view of the leader would send on to this follower.
    const again = await call(`${sidecars[f]!.url}/maintenance/defrag`, { token: TOKEN, headers: { [FORWARDED_HEADER]: '1' } });
    expect(again.status).toBe(503);
    expect(again.body).toMatch(/does not lead the cluster and the request was already forwarded once; not forwarding again/);
    expect(forwardedLines(sidecars[f]!)).toBe(before);
    expect(await maintenanceCount(sidecars[leader]!.url, 'defrag')).toBe(1);
    // The leader serves a forwarded request itself.
    const onLeader = await call(`${sidecars[leader]!.url}/maintenance/compact`, {
      method: 'GET',
      token: TOKEN,
      headers: { [FORWARDED_HEADER]: '1' },
    });
    expect(onLeader.status).toBe(200);
    failed = false;
  }, 60_000);
});
