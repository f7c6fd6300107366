/**
 * Snapshot → restore with real etcd on the providers that have no cloud here (issue 16), as processes:
 * `etcdbrctl snapshot` takes a full snapshot and deltas of a live etcd into the store, `etcdbrctl restore`
 * builds a data dir from the store, and the etcd started on it holds exactly the source's keys and
 * revisions. Swift runs on a real Swift all-in-one behind the fake Keystone, OSS on the fake of the OSS API
 * (driven by the real ali-oss client inside the CLI), ECS and OCS on s3rver; each
 * is configured by its credential files or environment only. Then a `copy` from one provider to another
 * (Swift → OCS and OSS → ECS, the source through SOURCE_ credentials) restores to the same state.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterEach, describe, expect, it } from 'vitest';
import { startLocalEtcd } from '../src/etcd/local-etcd.js';
import { etcdBinaries, startTestEtcd } from '../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { startTarget, type ProviderTarget, type RoundTripProvider } from './support/provider-targets.js';
import { runCli, startCli } from './support/cli-process.js';
import { waitFor } from './support/sidecar.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

const start = (args: string[], env: NodeJS.ProcessEnv) => startCli(args, env, cleanups);
const etcdbrctl = (args: string[], env: NodeJS.ProcessEnv) => runCli(args, env, cleanups);

async function scratch(tag: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `etcdbr-e2e-rt-${tag}-`));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function target(provider: RoundTripProvider, dir: string): Promise<ProviderTarget> {
  const t = await startTarget(provider, dir);
  cleanups.push(() => t.stop());
  return t;
}

interface LsRow {
  kind: string;
  lastRevision: number;
}

async function ls(t: ProviderTarget): Promise<LsRow[]> {
  const r = await etcdbrctl(['ls', ...t.flags(''), '-o', 'json'], t.env(''));
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as LsRow[];
}

/** A live etcd with keys written before and after the snapshotter's first full snapshot. */
async function liveEtcd(): Promise<{ url: string; put: (prefix: string, n: number) => Promise<number> }> {
  const etcd = await startTestEtcd();
  cleanups.push(() => etcd.cleanup());
  const client = new Etcd3({ hosts: etcd.clientUrl });
  cleanups.push(async () => client.close());
  const put = async (prefix: string, n: number): Promise<number> => {
    for (let i = 0; i < n; i++)
      await client
        .put(`${prefix}/${i}`)
        .value(`v${i}-${'x'.repeat(i * 37)}`)
        .exec();
    // A deleted key and an overwritten one, so revisions and tombstones travel through the deltas too.
    await client.delete().key(`${prefix}/0`).exec();
    return Number((await client.put(`${prefix}/1`).value('overwritten').exec()).header.revision);
  };
  return { url: etcd.clientUrl, put };
}

/** `etcdbrctl snapshot` until a full and a delta covering the writes made after the full are stored. */
async function snapshotWithDeltas(t: ProviderTarget, etcd: Awaited<ReturnType<typeof liveEtcd>>): Promise<void> {
  await etcd.put('before-full', 40);
  const { child, exited } = start(
    [
      'snapshot',
      `--endpoints=${etcd.url}`,
      ...t.flags(''),
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1s',
      '--garbage-collection-period=0s',
    ],
    t.env(''),
  );
  await waitFor(async () => ((await ls(t)).some((r) => r.kind === 'Full') ? true : undefined), `a full snapshot in ${t.provider}`, 60_000);
  const last = await etcd.put('after-full', 25);
  await waitFor(
    async () => ((await ls(t)).some((r) => r.kind === 'Incr' && r.lastRevision >= last) ? true : undefined),
    `a delta up to revision ${last} in ${t.provider}`,
    60_000,
  );
  child.kill('SIGTERM');
  const exit = await exited;
  expect(exit.code, exit.stderr).toBe(0);
}

const restoreFlags = (dir: string, dataDir: string) => [
  `--data-dir=${dataDir}`,
  '--initial-cluster=default=http://127.0.0.1:2380',
  '--initial-advertise-peer-urls=http://127.0.0.1:2380',
  `--restoration-temp-snapshots-dir=${join(dir, 'restore-tmp')}`,
];

/** Restores from the store, starts etcd on the result and dumps it. */
async function restoreAndDump(t: ProviderTarget, dir: string): Promise<EtcdDump> {
  const dataDir = join(dir, `restored-${t.provider}.etcd`);
  const r = await etcdbrctl(['restore', ...t.flags(''), ...restoreFlags(dir, dataDir)], t.env(''));
  expect(r.code, r.stderr).toBe(0);
  const etcd = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir, name: 'default' });
  try {
    return await dumpEtcd(etcd.clientUrl);
  } finally {
    await etcd.stop();
  }
}

describe.each(['Swift', 'OSS', 'ECS', 'OCS'] as const)('snapshot → restore on %s with real etcd', (provider) => {
  it('restores exactly the keys, values and revisions etcd had', { timeout: 240_000 }, async () => {
    const dir = await scratch(provider);
    const t = await target(provider, dir);
    const etcd = await liveEtcd();
    await snapshotWithDeltas(t, etcd);
    const expected = await dumpEtcd(etcd.url);
    expect(expected.kvs.length).toBe(39 + 24);
    expect(await restoreAndDump(t, dir)).toEqual(expected);
  });
});

describe('copy between providers', () => {
  it.each([
    ['Swift', 'OCS'],
    ['OSS', 'ECS'],
  ] as const)(
    '%s → %s: the copy (source from SOURCE_ credentials) restores to the source etcd’s state',
    { timeout: 300_000 },
    async (from, to) => {
      const dir = await scratch(`copy-${from}`);
      const source = await target(from, dir);
      const dest = await target(to, dir);
      const etcd = await liveEtcd();
      await snapshotWithDeltas(source, etcd);
      const expected = await dumpEtcd(etcd.url);

      const copied = await etcdbrctl(['copy', ...source.flags('SOURCE_'), ...dest.flags('')], {
        ...source.env('SOURCE_'),
        ...dest.env(''),
      });
      expect(copied.code, copied.stderr).toBe(0);
      const rows = await ls(source);
      expect(copied.stdout).toMatch(new RegExp(`^Copied ${rows.length} snapshot\\(s\\), \\d+ bytes; 0 already present\\n$`));
      expect(await ls(dest)).toEqual(rows);
      expect(await restoreAndDump(dest, dir)).toEqual(expected);
    },
  );
});
