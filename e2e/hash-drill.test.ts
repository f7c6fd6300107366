/**
 * The hash drill end to end, against a real etcd 3.5 and the real sidecar and CLI processes: a chain the
 * sidecar wrote (a full snapshot and deltas of puts, overwrites, deletes, transactions, leased keys and a lease
 * revocation, with the live etcd compacted in the middle) is proven equal to etcd, by the leader's scheduled
 * drill (metrics) and by `etcdbrctl verify --against-endpoints` (exit 0). Then one delta's value is altered
 * with its sha256 trailer recomputed (a scrub finds nothing): the CLI exits 1 naming that revision and the
 * delta, and the sidecar's drill counts a mismatch and logs the same.
 */
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLocalStore } from '../test/support/local-store.js';
import { startEtcdWithClient, type EtcdWithClient } from '../test/support/etcd.js';
import { writeHistory } from '../test/support/hash-history.js';
import { runCli } from './support/cli-process.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';
import { tamperDeltaValue } from './support/tamper-delta.js';

/** The value of a metric sample (`name{labels}` exactly as exposed), or undefined when absent. */
async function metric(s: SidecarProcess, series: string): Promise<number | undefined> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('the hash drill against etcd 3.5', () => {
  let env: EtcdWithClient;
  let client: Etcd3;
  let sidecar: SidecarProcess;
  let storeDir: string;
  let tempDir: string;
  let head: number;
  let compactedAt: number;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    env = await startEtcdWithClient('etcdbr-hash-drill-');
    client = env.client;
    storeDir = join(env.dir, 'store');
    tempDir = join(env.dir, 'tmp');
    // History before the first full snapshot: it is in the base.
    await writeHistory(client, '/base/', 1);
    sidecar = await startSidecar([
      `--endpoints=${env.etcd.clientUrl}`,
      ...localStoreFlags(storeDir, tempDir),
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1s',
      '--garbage-collection-period=1h',
      '--hash-drill-schedule=@every 2s',
    ]);
    const s = sidecar;
    const revs = await writeHistory(client, '/deltas/', 2);
    // Stored before the next writes: the chain has more than one delta.
    await waitFor(async () => ((await metric(s, 'etcdbr_snapshot_latest_revision{kind="Incr"}')) ?? 0) >= revs.at(-1)!, 'the first deltas');
    compactedAt = revs[10]!;
    await client.kv.compact({ revision: String(compactedAt), physical: true });
    head = (await writeHistory(client, '/after-compaction/', 1)).at(-1)!;
    await waitFor(
      async () => ((await metric(s, 'etcdbr_snapshot_latest_revision{kind="Incr"}')) ?? 0) >= head,
      `a delta up to revision ${head}`,
    );
  }, 120_000);

  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
    await sidecar?.stop();
    await env?.cleanup();
  });

  it("the leader's scheduled drill proves the chain equal to etcd, compaction and leases included", async () => {
    const s = sidecar;
    await waitFor(
      async () => ((await metric(s, 'etcdbr_backup_hash_drill_last_proven_revision')) ?? 0) >= head,
      `a drill proving revision ${head}`,
      60_000,
    );
    expect(await metric(s, 'etcdbr_backup_hash_drill_runs_total{result="mismatch"}')).toBe(0);
    expect(await metric(s, 'etcdbr_backup_hash_drill_last_proven_timestamp_seconds')).toBeGreaterThan(0);
    // The log line comes through a pipe: waited for, not assumed there with the metric.
    await waitFor(() => s.logs().includes(`the store gives back what etcd holds at revision ${head}`), 'the log line of the proof');
  }, 90_000);

  it('verify --against-endpoints: exit 0 on the healthy chain; exit 1 naming the revision and the delta once a value is altered', async () => {
    const flags = ['verify', ...localStoreFlags(storeDir, join(env.dir, 'cli-tmp')), `--against-endpoints=${env.etcd.clientUrl}`];
    const healthy = await runCli(flags, {}, cleanups);
    expect({ code: healthy.code, stderr: healthy.stderr }).toEqual({ code: 0, stderr: '' });
    expect(healthy.stdout).toContain(`proven: the store gives back what etcd holds at revision ${head}`);
    expect(healthy.stdout).toMatch(/compact revision \d+/);
    const json = await runCli([...flags, '-o', 'json'], {}, cleanups);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({
      outcome: 'match',
      revision: head,
      members: [{ endpoint: env.etcd.clientUrl, compactRevision: compactedAt, equal: true }],
    });

    // A put after the compaction, in the middle of a delta: its value changes, the trailer is recomputed.
    const store = await openLocalStore(storeDir, join(env.dir, 'list-tmp'));
    const deltas = (await store.list()).filter((x) => x.kind === 'Incr');
    expect(deltas.length).toBeGreaterThan(1);
    await store.close();
    const target = Math.max(compactedAt + 5, deltas[1]!.startRevision + 2);
    const delta = deltas.find((d) => d.startRevision <= target && d.lastRevision >= target)!;
    expect(delta).toBeDefined();
    const altered = await tamperDeltaValue(storeDir, delta, target, Buffer.from('not what etcd has'));
    // A scrub finds nothing wrong with the altered delta: its trailer matches.
    const scrub = await runCli(['verify', ...localStoreFlags(storeDir, join(env.dir, 'cli-tmp'))], {}, cleanups);
    expect(scrub.code).toBe(0);

    const broken = await runCli(flags, {}, cleanups);
    expect(broken.code).toBe(1);
    expect(broken.stdout).toContain('MISMATCH');
    expect(broken.stderr).toContain(`in revision ${altered}`);
    expect(broken.stderr).toContain(delta.snapName);

    // The sidecar's next drill finds it too: the mismatch counter and a log line naming the revision.
    const s = sidecar;
    const logged = new RegExp(
      `does NOT give back what etcd holds: .*in revision ${altered} \\(held by [^)]*${delta.snapName.split('/').at(-1)}`,
    );
    await waitFor(() => logged.test(s.logs()), 'the log line naming the revision', 60_000);
    expect(await metric(s, 'etcdbr_backup_hash_drill_runs_total{result="mismatch"}')).toBeGreaterThanOrEqual(1);
  }, 120_000);
});
