/**
 * Backup → restore with real etcd on the providers that have no cloud here (issue 16), as processes.
 * Swift runs on a real Swift all-in-one (one for the whole file) behind a fake Keystone per store, OSS on
 * the fake of the OSS API (driven by the real ali-oss client inside the CLI), ECS and OCS on s3rver; each is
 * configured by its credential files or environment only.
 *
 * - `etcdbrctl server` (the sidecar) takes its full snapshot and deltas of a live etcd into the store; on
 *   Swift (a JSON credentials file) and OSS (a credentials directory mounted as the kubelet mounts a Secret)
 *   the credentials are rotated while it runs (the old ones refused from then on) and its next delta lands
 *   with the new ones; `etcdbrctl restore` then builds a data dir whose etcd holds exactly the
 *   source's keys, values and revisions.
 * - A Swift store in the Go tool's layout (segments `<name>/%010d` and a DLO manifest), made here by hand
 *   from an etcdctl snapshot and a delta written in upstream's documented format, restores exactly.
 * - `etcdbrctl snapshot` into Swift and OSS, `copy` (source through SOURCE_ credentials) to OCS and ECS,
 *   and the copy restores to the source's state.
 *
 * The stores are looked at in this process through the snapstore API (ProviderTarget.open), not by a CLI
 * process per poll.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { Etcd3 } from 'etcd3';
import type { Snapshot } from '@etcdbrctl/snapstore';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startLocalEtcd } from '../src/etcd/local-etcd.js';
import { etcdBinaries, startTestEtcd } from '../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { STORE_PREFIX, TargetServers, startTarget, type ProviderTarget, type RoundTripProvider } from './support/provider-targets.js';
import { runCli, startCli } from './support/cli-process.js';
import { startSidecar, waitFor } from './support/sidecar.js';

const servers = new TargetServers();
// The Swift tests come last; the all-in-one starts up meanwhile.
beforeAll(() => servers.warmUpSwift());
afterAll(() => servers.stop());

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
  const t = await startTarget(provider, dir, servers);
  cleanups.push(() => t.stop());
  return t;
}

/** The snapshots in the store (no Swift segments), read in this process with the credentials as they are now. */
async function snapshots(t: ProviderTarget): Promise<Snapshot[]> {
  const store = await t.open();
  try {
    return (await store.list()).filter((s) => !s.isChunk);
  } finally {
    await store.close();
  }
}

function waitForSnapshot(t: ProviderTarget, match: (s: Snapshot) => boolean, what: string): Promise<Snapshot> {
  return waitFor(async () => (await snapshots(t)).find(match), `${what} in ${t.provider}`, 60_000, 200);
}

const rows = (list: Snapshot[]) => list.map((s) => `${s.kind} ${s.startRevision}-${s.lastRevision} ${s.snapName}`).sort();

/** A live etcd; `put` writes n keys, deletes one and overwrites one, so tombstones and versions travel too. */
async function liveEtcd(): Promise<{ url: string; client: Etcd3; put: (prefix: string, n: number) => Promise<number> }> {
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
    await client.delete().key(`${prefix}/0`).exec();
    return Number((await client.put(`${prefix}/1`).value('overwritten').exec()).header.revision);
  };
  return { url: etcd.clientUrl, client, put };
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
  await waitForSnapshot(t, (s) => s.kind === 'Full', 'a full snapshot');
  const last = await etcd.put('after-full', 25);
  await waitForSnapshot(t, (s) => s.kind === 'Incr' && s.lastRevision >= last, `a delta up to revision ${last}`);
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

/** `etcdbrctl restore` from the store, etcd started on the result, and its dump. */
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

describe.each(['OSS', 'ECS', 'OCS', 'Swift'] as const)('etcdbrctl server on %s → etcdbrctl restore, real etcd', (provider) => {
  it(
    'full and deltas (credentials rotated on the way where the fake can refuse the old ones) restore exactly',
    { timeout: 180_000 },
    async () => {
      const dir = await scratch(`server-${provider}`);
      const t = await target(provider, dir);
      const etcd = await liveEtcd();
      await etcd.put('before-full', 40);
      const sidecar = await startSidecar(
        [
          `--endpoints=${etcd.url}`,
          ...t.flags(''),
          `--snapstore-temp-directory=${join(dir, 'tmp')}`,
          '--schedule=0 0 1 1 *',
          '--delta-snapshot-period=1s',
          '--garbage-collection-period=1h',
        ],
        t.env(''),
      );
      cleanups.push(() => sidecar.stop('SIGKILL'));
      await waitForSnapshot(t, (s) => s.kind === 'Full', 'the server’s full snapshot');
      const afterFull = await etcd.put('after-full', 25);
      await waitForSnapshot(t, (s) => s.kind === 'Incr' && s.lastRevision >= afterFull, `a delta up to revision ${afterFull}`);
      let keys = 39 + 24;

      if (t.rotateCredentials) {
        // Nothing is buffered now (the delta above covers every write), so the server touches the store
        // next for the writes below, after the rotation: with the old credentials it would fail for good.
        await t.rotateCredentials();
        const afterRotation = await etcd.put('after-rotation', 10);
        await waitForSnapshot(
          t,
          (s) => s.kind === 'Incr' && s.lastRevision >= afterRotation,
          `a delta up to revision ${afterRotation} with the new credentials`,
        );
        expect(sidecar.logs()).toContain('snapstore credentials changed; re-created the store client');
        keys += 9;
      }
      expect(await sidecar.stop()).toBe(0);

      const expected = await dumpEtcd(etcd.url);
      expect(expected.kvs.length).toBe(keys);
      expect(await restoreAndDump(t, dir)).toEqual(expected);
    },
  );
});

describe('copy between providers', () => {
  it.each([
    ['OSS', 'ECS'],
    ['Swift', 'OCS'],
  ] as const)(
    'etcdbrctl snapshot into %s, copy to %s (source from SOURCE_ credentials), restore: the source etcd’s state',
    { timeout: 180_000 },
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
      const inSource = rows(await snapshots(source));
      expect(copied.stdout).toMatch(new RegExp(`^Copied ${inSource.length} snapshot\\(s\\), \\d+ bytes; 0 already present\\n$`));
      expect(rows(await snapshots(dest))).toEqual(inSource);
      expect(await restoreAndDump(dest, dir)).toEqual(expected);
    },
  );
});

describe('a Swift store in the Go tool’s layout', () => {
  const MiB = 1024 * 1024;
  const pad = (n: number, width: number) => String(n).padStart(width, '0');

  /** A delta object as upstream writes it: JSON array of {etcdEvent, time}, its sha256 appended, gzip. */
  function goDelta(events: Array<{ type: string; kv: Record<string, unknown> }>): Buffer {
    const b64 = (b: unknown) => (b as Buffer).toString('base64');
    const items = events.map((e) => {
      // Go's encoding/json of clientv3.Event: type omitted for PUT, kv fields omitted when empty/zero.
      const kv = e.kv;
      const fields = [`"key":"${b64(kv['key'])}"`];
      if (e.type === 'Put') fields.push(`"create_revision":${String(kv['create_revision'])}`);
      fields.push(`"mod_revision":${String(kv['mod_revision'])}`);
      if (e.type === 'Put') fields.push(`"version":${String(kv['version'])}`);
      if ((kv['value'] as Buffer).length > 0) fields.push(`"value":"${b64(kv['value'])}"`);
      if (String(kv['lease']) !== '0') fields.push(`"lease":${String(kv['lease'])}`);
      const type = e.type === 'Delete' ? '"type":1,' : '';
      return `{"etcdEvent":{${type}"kv":{${fields.join(',')}}},"time":"${new Date().toISOString()}"}`;
    });
    const json = Buffer.from(`[${items.join(',')}]`);
    return gzipSync(Buffer.concat([json, createHash('sha256').update(json).digest()]));
  }

  it(
    'segments <name>/%010d of max(5 MiB, size/999) and a manifest: etcdbrctl restore gives every key, value and the revision',
    { timeout: 180_000 },
    async () => {
      const dir = await scratch('go-swift');
      const t = await startTarget('Swift', dir, servers);
      cleanups.push(() => t.stop());
      const etcd = await liveEtcd();
      // Over 5 MiB of incompressible values, so upstream's chunking gives the full snapshot two segments.
      for (let i = 0; i < 48; i++)
        await etcd.client
          .put(`big/${pad(i, 2)}`)
          .value(randomBytes(128 * 1024))
          .exec();
      const fullRev = await etcd.put('before-full', 30);
      const fullFile = join(dir, 'full.db');
      const binaries = await etcdBinaries();
      await promisify(execFile)(binaries.etcdctl ?? 'etcdctl', [`--endpoints=${etcd.url}`, 'snapshot', 'save', fullFile], {
        env: { ...process.env, ETCDCTL_API: '3' },
      });
      // etcdctl keeps the stream's sha256 trailer, as upstream's stored full snapshots do.
      const full = await readFile(fullFile);
      expect(full.length % 512).toBe(32);

      const lastRev = await etcd.put('after-full', 20);
      await etcd.client.delete().key('big/07').exec();
      const deltaLast = Number((await etcd.client.put('big/08').value('small now').exec()).header.revision);
      expect(deltaLast).toBe(lastRev + 2);
      // What etcd itself reports for the revisions after the full, through a watch.
      const events: Array<{ type: string; kv: Record<string, unknown> }> = [];
      const watcher = await etcd.client
        .watch()
        .prefix('')
        .startRevision(String(fullRev + 1))
        .create();
      cleanups.push(() => watcher.cancel());
      watcher.on('data', (res) =>
        events.push(...res.events.map((e) => ({ type: String(e.type), kv: e.kv as unknown as Record<string, unknown> }))),
      );
      await waitFor(() => Number(events.at(-1)?.kv['mod_revision'] ?? 0) >= deltaLast, `watch events up to revision ${deltaLast}`);
      expect(events.filter((e) => e.type === 'Delete').length).toBe(2);

      const now = Math.floor(Date.now() / 1000);
      const fullName = `Full-${pad(0, 8)}-${pad(fullRev, 8)}-${now - 60}`;
      const deltaName = `Incr-${pad(fullRev + 1, 8)}-${pad(deltaLast, 8)}-${now}.gz`;
      const putGoObject = async (name: string, data: Buffer): Promise<number> => {
        const key = `${STORE_PREFIX}/v2/${name}`;
        const chunk = Math.max(5 * MiB, Math.floor(data.length / 999));
        let segments = 0;
        for (let off = 0; off < data.length; off += chunk)
          await t.swift.putObject(t.container, `${key}/${pad(++segments, 10)}`, data.subarray(off, off + chunk));
        await t.swift.putObject(t.container, key, Buffer.alloc(0), { 'x-object-manifest': `${t.container}/${key}` });
        return segments;
      };
      expect(await putGoObject(fullName, full)).toBe(2);
      expect(await putGoObject(deltaName, goDelta(events))).toBe(1);
      expect(await t.swift.objectNames(t.container)).toEqual([
        `${STORE_PREFIX}/v2/${fullName}`,
        `${STORE_PREFIX}/v2/${fullName}/0000000001`,
        `${STORE_PREFIX}/v2/${fullName}/0000000002`,
        `${STORE_PREFIX}/v2/${deltaName}`,
        `${STORE_PREFIX}/v2/${deltaName}/0000000001`,
      ]);

      const expected = await dumpEtcd(etcd.url);
      expect(expected.revision).toBe(deltaLast);
      const restored = await restoreAndDump(t, dir);
      expect(restored.revision).toBe(deltaLast);
      expect(restored).toEqual(expected);
    },
  );
});
