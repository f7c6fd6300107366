import { createHash } from 'node:crypto';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { freePort } from '../src/etcd/ports.js';
import { startEtcdWithClient, type EtcdWithClient, type TestEtcd } from '../test/support/etcd.js';
import { openLocalStore } from '../test/support/local-store.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

describe('etcdbrctl server (process) with a Local store', () => {
  let etcdEnv: EtcdWithClient;
  let etcd: TestEtcd;
  let client: Etcd3;
  let dir: string;
  let store: SnapStore;
  let sidecar: SidecarProcess | undefined;

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-e2e-server-');
    ({ etcd, client, dir } = etcdEnv);
    store = await openLocalStore(join(dir, 'store'), dir);
  });

  afterEach(async () => {
    await sidecar?.stop('SIGKILL');
    sidecar = undefined;
    await store.close();
    await etcdEnv.cleanup();
  });

  const flags = (extra: string[] = []) => [
    `--endpoints=${etcd.clientUrl}`,
    ...localStoreFlags(join(dir, 'store'), join(dir, 'tmp')),
    '--schedule=0 0 1 1 *',
    // Long enough that no periodic delta races the on-demand one below (which must start right after the
    // full), and that the writes before SIGTERM can only reach the store through the final flush.
    '--delta-snapshot-period=1h',
    '--garbage-collection-period=1h',
    '--reelection-period=2s',
    ...extra,
  ];
  const rev = async () => Number((await client.get('foo').exec()).header.revision);

  it('becomes healthy, snapshots, answers the API and flushes the last delta on SIGTERM', async () => {
    sidecar = await startSidecar(flags());
    const s = sidecar;
    const health = await waitFor(async () => {
      const r = await fetch(`${s.url}/healthz`);
      return r.status === 200 ? r.text() : undefined;
    }, 'healthz 200');
    expect(health).toBe('{"health":true}');
    await waitFor(async () => ((await store.list()).some((x) => x.kind === 'Full') ? true : undefined), 'initial full');

    const bad = await fetch(`${s.url}/snapshot/full?final=maybe`);
    expect(bad.status).toBe(400);

    for (let i = 0; i < 10; i++) await client.put(`/registry/a${i}`).value(`v${i}`);
    const full = await fetch(`${s.url}/snapshot/full`, { method: 'POST' });
    expect(full.status).toBe(200);
    const fullJson = (await full.json()) as { kind: string; lastRevision: number; snapName: string };
    expect(fullJson.kind).toBe('Full');
    expect(fullJson.lastRevision).toBe(await rev());

    for (let i = 0; i < 5; i++) await client.put(`/registry/b${i}`).value(`v${i}`);
    const delta = await fetch(`${s.url}/snapshot/delta`);
    expect(delta.status).toBe(200);
    const deltaJson = (await delta.json()) as { kind: string; startRevision: number; lastRevision: number };
    expect(deltaJson).toMatchObject({ kind: 'Incr', startRevision: fullJson.lastRevision + 1, lastRevision: await rev() });

    const latest = (await (await fetch(`${s.url}/snapshot/latest`)).json()) as {
      fullSnapshot: { snapName: string };
      deltaSnapshots: Array<{ lastRevision: number }>;
    };
    expect(latest.fullSnapshot.snapName).toBe(fullJson.snapName);
    expect(latest.deltaSnapshots.at(-1)?.lastRevision).toBe(deltaJson.lastRevision);

    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    expect(metrics).toContain(`etcdbr_snapshot_latest_revision{kind="Incr"} ${deltaJson.lastRevision}`);
    // The size gauge is each kind's newest stored object, byte for byte as the store lists it.
    const listed = await store.list();
    const storedFull = listed.find((x) => x.snapName === fullJson.snapName)!;
    const storedDelta = listed.find((x) => x.kind === 'Incr' && x.lastRevision === deltaJson.lastRevision)!;
    expect(storedFull.sizeBytes).toBeGreaterThan(0);
    expect(metrics).toContain(`etcdbr_snapshot_size_bytes{kind="Full"} ${storedFull.sizeBytes}`);
    expect(metrics).toContain(`etcdbr_snapshot_size_bytes{kind="Incr"} ${storedDelta.sizeBytes}`);

    // Writes right before SIGTERM end up in a last delta (upstream would lose them).
    for (let i = 0; i < 3; i++) await client.put(`/registry/c${i}`).value('late');
    const last = await rev();
    expect(await s.stop('SIGTERM')).toBe(0);
    const list = await store.list();
    expect(list.at(-1)?.lastRevision).toBe(last);
  });

  it("removes at start the temp files its member's killed sidecar left in the store, and no other writer's", async () => {
    // The naming rule (snapstore/src/providers/local.ts): `.etcd-backup-<12 hex>.<16 hex of sha256(owner)>`,
    // the owner of a server being `server/<POD_NAME>`. Both files are fresh, as after a kill a moment ago.
    const noEtcdPort = await freePort();
    const tag = (owner: string) => createHash('sha256').update(owner).digest('hex').slice(0, 16);
    const v2 = join(dir, 'store', 'v2');
    await mkdir(v2, { recursive: true });
    const mine = `.etcd-backup-0123456789ab.${tag('server/etcd-main-0')}`;
    const others = [`.etcd-backup-0123456789ab.${tag('server/etcd-main-1')}`, '.etcd-backup-0123456789ab'];
    for (const f of [mine, ...others]) await writeFile(join(v2, f), 'half a snapshot');
    // Without an etcd to lead (nothing listens there): every member sweeps at start, not only the leader.
    const noEtcd = flags().map((f) => (f.startsWith('--endpoints=') ? `--endpoints=http://127.0.0.1:${noEtcdPort}` : f));
    sidecar = await startSidecar(noEtcd, { POD_NAME: 'etcd-main-0' });
    const temps = async () => (await readdir(v2)).filter((f) => f.startsWith('.etcd-backup-')).sort();
    await waitFor(async () => ((await temps()).includes(mine) ? undefined : true), 'its own temp file removed');
    expect(await temps()).toEqual(others.sort());
    expect(await store.list()).toEqual([]);
  });

  it('Ctrl-C under npm (two SIGINTs at once) is one orderly shutdown: the last delta is still written', async () => {
    sidecar = await startSidecar(flags());
    const s = sidecar;
    await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
    await waitFor(async () => ((await store.list()).some((x) => x.kind === 'Full') ? true : undefined), 'initial full');
    for (let i = 0; i < 3; i++) await client.put(`/registry/ctrl-c${i}`).value('late');
    const last = await rev();
    // The delta period is 1h: these writes reach the store only through the shutdown's last delta, which a
    // second signal must not cut short (the terminal and npm each deliver one on Ctrl-C).
    s.child.kill('SIGINT');
    s.child.kill('SIGINT');
    expect(await s.exited).toBe(0);
    expect(s.logs()).toContain('received SIGINT: shutting down in order');
    expect(s.logs()).toContain('"msg":"server stopped"');
    expect(s.logs()).not.toContain('forcing the exit');
    const list = await store.list();
    expect(list.at(-1)?.kind).toBe('Incr');
    expect(list.at(-1)?.lastRevision).toBe(last);
  });

  describe('while the shutdown waits for a hung etcd (SIGSTOP)', () => {
    // Two signals sent back to back may reach the process as one (the kernel merges a pending signal), so
    // these tests send the next signal only once the process has logged the previous one. A stopped etcd
    // holds the orderly shutdown (it waits for etcd's answers) until the test resumes it, so the process is
    // still shutting down when the next signal arrives.
    let paused = false;
    const pauseEtcd = () => {
      process.kill(etcd.pid, 'SIGSTOP');
      paused = true;
    };
    const resumeEtcd = () => {
      if (paused) process.kill(etcd.pid, 'SIGCONT');
      paused = false;
    };
    afterEach(resumeEtcd);
    const logged = (s: SidecarProcess, text: string) =>
      waitFor(async () => (s.logs().includes(text) ? true : undefined), `log ${JSON.stringify(text)}`);

    it('a second signal within the window is the same request: the shutdown goes on and writes the last delta', async () => {
      // A long window, so that the test does not depend on how fast it sends the second signal.
      sidecar = await startSidecar(flags(), { ETCDBRCTL_STOP_SIGNAL_WINDOW: '10m' });
      const s = sidecar;
      await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
      await waitFor(async () => ((await store.list()).some((x) => x.kind === 'Full') ? true : undefined), 'initial full');
      for (let i = 0; i < 3; i++) await client.put(`/registry/held${i}`).value('late');
      const last = await rev();
      pauseEtcd();
      s.child.kill('SIGINT');
      await logged(s, 'received SIGINT: shutting down in order');
      s.child.kill('SIGINT');
      await logged(s, 'received SIGINT again within 10m0s: the same stop request').catch((err: unknown) => {
        throw new Error(
          `${(err as Error).message}; the process ${s.child.exitCode === null ? 'still runs' : `exited with ${s.child.exitCode}`}; its log:\n${s.logs()}`,
        );
      });
      resumeEtcd();
      expect(await s.exited).toBe(0);
      expect(s.logs()).toContain('"msg":"server stopped"');
      expect(s.logs()).not.toContain('forcing the exit');
      const list = await store.list();
      expect(list.at(-1)?.kind).toBe('Incr');
      expect(list.at(-1)?.lastRevision).toBe(last);
    });

    it('a signal after the window forces the exit at once, and says so', async () => {
      // Window 0: every signal after the first is "later" (the default 2s would make the test wait).
      sidecar = await startSidecar(flags(), { ETCDBRCTL_STOP_SIGNAL_WINDOW: '0s' });
      const s = sidecar;
      await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
      pauseEtcd();
      s.child.kill('SIGINT');
      await logged(s, 'received SIGINT: shutting down in order');
      s.child.kill('SIGTERM');
      // Exits while etcd is still stopped: nothing but the forced exit can end the process here.
      expect(await s.exited).toBe(1);
      expect(s.logs()).toContain('received SIGTERM again during the shutdown: forcing the exit now');
      expect(s.logs()).not.toContain('"msg":"server stopped"');
    });
  });

  it('exits on SIGTERM without waiting for a lost etcd to come back', async () => {
    sidecar = await startSidecar(flags());
    const s = sidecar;
    await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
    await etcd.stop();
    await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 503 ? true : undefined), 'healthz 503');
    // The etcd3 client keeps retrying the watch for up to 30 s; the process must not wait for that (a pod's
    // default grace period is 30 s). 15 s is far above a normal shutdown and far below the retry.
    s.child.kill('SIGTERM');
    const code = await Promise.race([s.exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 15_000))]);
    expect({ code, logs: code === 'hung' ? s.logs() : '' }).toEqual({ code: 0, logs: '' });
  });

  it('without a storage provider: healthy leader, 405 on snapshot routes', async () => {
    sidecar = await startSidecar([`--endpoints=${etcd.clientUrl}`, '--reelection-period=2s']);
    const s = sidecar;
    await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
    expect((await fetch(`${s.url}/snapshot/full`)).status).toBe(405);
    expect((await fetch(`${s.url}/snapshot/delta`)).status).toBe(405);
  });
});
