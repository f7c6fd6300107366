/**
 * `etcdbrctl server` as a process with secondary backup sync (upstream v0.41 #917): a real etcd, a
 * Local primary store and an S3 secondary (s3rver) reached with `--secondary-*` flags and `SECONDARY_*`
 * credentials. The leader's snapshots must show up in the secondary byte for byte, the secondary must be
 * garbage-collected with the primary's policy, and SIGTERM must stop the sync cleanly.
 */
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSnapStore, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../snapstore/test/support/s3rver.js';
import { startEtcdWithClient, type EtcdWithClient, type TestEtcd } from '../test/support/etcd.js';
import { openLocalStore } from '../test/support/local-store.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

const MiB = 1024 * 1024;

async function sha256(store: SnapStore, snap: Snapshot): Promise<string> {
  const hash = createHash('sha256');
  for await (const c of await store.fetch(snap)) hash.update(c as Buffer);
  return hash.digest('hex');
}

describe('etcdbrctl server (process) with secondary backup sync: Local primary, S3 secondary', () => {
  let etcdEnv: EtcdWithClient;
  let etcd: TestEtcd;
  let client: Etcd3;
  let dir: string;
  let s3: S3rverInstance;
  let primary: SnapStore;
  let secondary: SnapStore;
  let sidecar: SidecarProcess | undefined;
  let env: NodeJS.ProcessEnv;

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-e2e-secsync-');
    ({ etcd, client, dir } = etcdEnv);
    s3 = await startS3rver({ bucket: 'secondary' });
    await writeFile(join(dir, 'secondary-s3.json'), JSON.stringify(S3RVER_CREDENTIALS));
    env = { SECONDARY_AWS_APPLICATION_CREDENTIALS_JSON: join(dir, 'secondary-s3.json') };
    primary = await openLocalStore(join(dir, 'primary'), dir);
    secondary = await openSnapStore({
      provider: 'S3',
      container: 'secondary',
      prefix: 'backups/v2',
      endpointOverride: s3.endpoint,
      maxParallelChunkUploads: 5,
      minChunkSize: 5 * MiB,
      tempDir: dir,
      credentials: S3RVER_CREDENTIALS,
    });
  });

  afterEach(async () => {
    await sidecar?.stop('SIGKILL');
    sidecar = undefined;
    await primary.close();
    await secondary.close();
    await s3.stop();
    await etcdEnv.cleanup();
  });

  const flags = (extra: string[] = []) => [
    `--endpoints=${etcd.clientUrl}`,
    ...localStoreFlags(join(dir, 'primary'), join(dir, 'tmp')),
    '--schedule=0 0 1 1 *',
    '--delta-snapshot-period=1s',
    '--reelection-period=2s',
    '--secondary-backup-sync-enabled=true',
    '--secondary-backup-sync-period=2s',
    '--secondary-storage-provider=S3',
    '--secondary-store-container=secondary',
    '--secondary-store-prefix=backups',
    `--secondary-store-endpoint-override=${s3.endpoint}`,
    `--secondary-snapstore-temp-directory=${join(dir, 'tmp-secondary')}`,
    ...extra,
  ];

  /** Name → sha256 of every object in the store. */
  const contents = async (store: SnapStore) => {
    const out = new Map<string, string>();
    for (const s of await store.list()) out.set(s.snapName, await sha256(store, s));
    return out;
  };

  it('copies the leader’s snapshots to the secondary, GCs it with the primary’s policy, and stops on SIGTERM', async () => {
    sidecar = await startSidecar(
      flags(['--garbage-collection-policy=LimitBased', '--max-backups=1', '--garbage-collection-period=2s']),
      env,
    );
    const s = sidecar;
    await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
    const initial = await waitFor(async () => (await primary.list()).find((x) => x.kind === 'Full'), 'initial full in the primary');
    await waitFor(
      async () => ((await secondary.list()).some((x) => x.snapName === initial.snapName) ? true : undefined),
      'initial full in the secondary',
    );

    for (let i = 0; i < 20; i++) await client.put(`/registry/a${i}`).value(`v${i}`);
    const delta = await waitFor(async () => (await primary.list()).find((x) => x.kind === 'Incr'), 'a delta in the primary');
    await waitFor(
      async () => ((await secondary.list()).some((x) => x.snapName === delta.snapName) ? true : undefined),
      'the delta in the secondary',
    );

    // A second full: the LimitBased policy (1 backup) removes the first backup from both stores.
    for (let i = 0; i < 5; i++) await client.put(`/registry/b${i}`).value(`v${i}`);
    const full = (await (await fetch(`${s.url}/snapshot/full`, { method: 'POST' })).json()) as { snapName: string; lastRevision: number };
    const onlyNewest = (list: Snapshot[]) =>
      list.every((x) => x.snapName === full.snapName || (x.kind === 'Incr' && x.startRevision > full.lastRevision)) &&
      list.some((x) => x.snapName === full.snapName);
    await waitFor(
      async () => (onlyNewest(await primary.list()) ? true : undefined),
      'the primary garbage-collected down to the newest backup',
    );

    // No more writes, so the primary stays as it is now; the secondary must become its exact mirror,
    // which takes the secondary's own GC: the first backup was copied there and only GC deletes.
    const wanted = await contents(primary);
    await waitFor(async () => {
      const have = await contents(secondary);
      return have.size === wanted.size && [...wanted].every(([name, hash]) => have.get(name) === hash) ? true : undefined;
    }, 'the secondary holding exactly the primary objects, byte for byte');
    expect(wanted.has(initial.snapName) || wanted.has(delta.snapName)).toBe(false);

    expect(await s.stop('SIGTERM')).toBe(0);
    const logs = s.logs();
    expect(logs).toContain('secondary backup sync started');
    expect(logs).toContain('secondary backup sync stopped');
    expect(logs).not.toContain('secondary backup sync round failed');
    // Shutdown added nothing, partial or whole, to the secondary.
    expect(await contents(secondary)).toEqual(wanted);
  });
});
