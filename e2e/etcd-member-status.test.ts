/**
 * `etcdbrctl server` with Kubernetes enabled publishes its EtcdMember status (DEP-04): a single-member
 * cluster driven through the etcd-wrapper protocol goes New → Initializing → Started(Leader), with the
 * restoration, member/cluster ids, DB sizes and snapshots filled in, all read back from the fake API.
 */
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/etcd/ports.js';
import { etcdBinaries } from '../test/support/etcd.js';
import { ETCD_MEMBERS, LEASES } from '../test/support/fake-kube.js';
import { useFakeKube } from '../test/support/fake-kube-fixture.js';
import { LEASE_RENEWAL_FLAGS, localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';
import { runWrapper, type ConfiguredEtcd } from './support/wrapper.js';
import { UPSTREAM_V023 } from '../test/support/fixtures.js';

const COMPAT = UPSTREAM_V023;
const NS = 'shoot--dev--member-status';
const POD = 'etcd-main-0';

interface Transition {
  state: string;
  subState: string;
  reason: string;
  transitionTime: string;
  message: string;
}
interface SnapshotStatus {
  timestamp: string;
  name: string;
  size?: string;
  startRevision: number;
  endRevision: number;
}
interface MemberStatus {
  id?: string;
  clusterID?: string;
  peerTLSEnabled?: boolean;
  dbSize?: string;
  dbSizeInUse?: string;
  snapshots?: { lastFull?: SnapshotStatus; lastDelta?: SnapshotStatus; accumulatedDeltaSize?: string };
  lastRestoration?: Record<string, string>;
  transitions?: Transition[];
}

/** A binary-suffixed Kubernetes quantity as bytes; NaN for anything else. */
function bytes(q: string | undefined): number {
  const m = /^([0-9]+)(Ki|Mi|Gi)?$/.exec(q ?? '');
  if (!m) return Number.NaN;
  return Number(m[1]) * 1024 ** ['', 'Ki', 'Mi', 'Gi'].indexOf(m[2] ?? '');
}

describe('etcdbrctl server publishes the EtcdMember status', () => {
  let dir: string;
  let sidecar: SidecarProcess | undefined;
  let etcd: ConfiguredEtcd | undefined;
  // What etcd-druid creates before the StatefulSet: the EtcdMember and the leases.
  const k8s = useFakeKube({
    seed: (fake) => {
      fake.seed(ETCD_MEMBERS, {
        apiVersion: 'druid.gardener.cloud/v1alpha1',
        kind: 'EtcdMember',
        metadata: { name: POD, namespace: NS, labels: { 'gardener.cloud/owned-by': 'etcd-main' } },
      });
      for (const name of [POD, 'etcd-main-full-snap', 'etcd-main-delta-snap'])
        fake.seed(LEASES, { metadata: { name, namespace: NS }, spec: {} });
    },
  });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-member-status-'));
    await writeFile(join(dir, 'kubeconfig'), k8s.fake.kubeconfig());
  });

  afterAll(async () => {
    await sidecar?.stop('SIGKILL');
    await etcd?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const status = (): MemberStatus => (k8s.fake.read(ETCD_MEMBERS, NS, POD)?.status ?? {}) as MemberStatus;
  const states = (): string[] => (status().transitions ?? []).map((t) => `${t.state}/${t.subState}`);

  it('New → Initializing(DBValidationFull → Restoration) → Started(Leader), then ids, sizes and snapshots', async () => {
    const clientPort = await freePort();
    const peerPort = await freePort();
    const dataDir = join(dir, 'var', 'new.etcd');
    await writeFile(
      join(dir, 'etcd.conf.yaml'),
      [
        `name: ${POD}`,
        `data-dir: ${dataDir}`,
        `listen-client-urls: http://127.0.0.1:${clientPort}`,
        `listen-peer-urls: http://127.0.0.1:${peerPort}`,
        'advertise-client-urls:',
        `  ${POD}: [http://127.0.0.1:${clientPort}]`,
        'initial-advertise-peer-urls:',
        `  ${POD}: [http://127.0.0.1:${peerPort}]`,
        `initial-cluster: ${POD}=http://127.0.0.1:${peerPort}`,
        'initial-cluster-token: etcd-cluster',
        'initial-cluster-state: new',
        '',
      ].join('\n'),
    );
    // A store with backups and no data dir: initialization restores.
    const store = join(dir, 'store');
    await cp(join(COMPAT, 'zlib', 'snapstore'), store, { recursive: true });

    sidecar = await startSidecar(
      [
        `--endpoints=http://127.0.0.1:${clientPort}`,
        ...localStoreFlags(store, join(dir, 'snaptmp')),
        `--data-dir=${dataDir}`,
        `--restoration-temp-snapshots-dir=${join(dir, 'restoration.tmp')}`,
        `--name=${POD}`,
        `--initial-cluster=${POD}=http://127.0.0.1:${peerPort}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
        '--schedule=0 0 1 1 *',
        '--delta-snapshot-period=1s',
        '--reelection-period=2s',
        ...LEASE_RENEWAL_FLAGS,
      ],
      { KUBECONFIG: join(dir, 'kubeconfig'), POD_NAMESPACE: NS, POD_NAME: POD, ETCD_CONF: join(dir, 'etcd.conf.yaml') },
    );
    const s = sidecar;

    // Before anything else: the member is New.
    await waitFor(async () => (states().length > 0 ? true : undefined), 'the initial EtcdMember status');
    expect(states(), s.logs()).toEqual(['New/New']);
    expect(status().transitions?.[0]?.reason).toBe('NewSingleNodeClusterCreated');
    expect(status().peerTLSEnabled).toBe(false);

    const wrapper = await runWrapper(s.url, { binaries: await etcdBinaries(), workDir: join(dir, 'wrapper'), mode: 'full' });
    etcd = wrapper.etcd;
    expect(wrapper.handshake.ok, s.logs()).toBe(true);
    await etcd!.ready();

    await waitFor(async () => (states().includes('Started/Leader') ? true : undefined), 'Started/Leader in the EtcdMember status');
    expect(status().transitions!.map((t) => `${t.state}/${t.subState}:${t.reason}`)).toEqual([
      'New/New:NewSingleNodeClusterCreated',
      'Initializing/DBValidationFull:DetectedPreviousUncleanExit',
      'Initializing/Restoration:DBValidationFailed',
      'Started/Leader:RestorationSucceeded',
    ]);
    expect(status().lastRestoration).toMatchObject({ type: 'FromSnapshot', status: 'Success', reason: 'RestorationSucceeded' });
    expect(status().lastRestoration?.message).toBe('Restored from the backups');
    expect(Date.parse(status().lastRestoration!.endTime!)).toBeGreaterThanOrEqual(Date.parse(status().lastRestoration!.startTime!));

    // Ids in hex, as the member lease has them; the sizes as quantities.
    const client = new Etcd3({ hosts: etcd!.clientUrl });
    try {
      const st = (await client.maintenance.status()) as unknown as { header: { member_id: string; cluster_id: string } };
      await waitFor(async () => (status().id !== undefined ? true : undefined), 'member id');
      expect(status().id).toBe(BigInt(st.header.member_id).toString(16));
      expect(status().clusterID).toBe(BigInt(st.header.cluster_id).toString(16));
      const holder = await waitFor(async () => {
        const h = (k8s.fake.read(LEASES, NS, POD)?.spec as { holderIdentity?: string } | undefined)?.holderIdentity;
        return h ?? undefined;
      }, 'member lease holder');
      expect(holder).toBe(`${status().id}:${status().clusterID}:Leader`);
      expect(bytes(status().dbSize)).toBeGreaterThan(0);
      expect(bytes(status().dbSizeInUse)).toBeGreaterThan(0);
      expect(bytes(status().dbSizeInUse)).toBeLessThanOrEqual(bytes(status().dbSize));

      // A full snapshot on demand, then writes that become a delta.
      const full = (await (await fetch(`${s.url}/snapshot/full`)).json()) as { snapName: string; lastRevision: number };
      const lastFull = await waitFor(async () => {
        const f = status().snapshots?.lastFull;
        return f?.name === full.snapName ? f : undefined;
      }, 'snapshots.lastFull');
      expect(lastFull).toMatchObject({ startRevision: 0, endRevision: full.lastRevision });
      expect(bytes(lastFull.size)).toBeGreaterThan(0);
      expect(status().snapshots?.accumulatedDeltaSize).toBe('0');

      // One write: one event, so exactly one delta after the full.
      const rev = Number((await client.put('member-status/key').value('x'.repeat(1000)).exec()).header.revision);
      expect(rev).toBe(full.lastRevision + 1);
      const lastDelta = await waitFor(async () => {
        const d = status().snapshots?.lastDelta;
        return d !== undefined && d.endRevision === rev ? d : undefined;
      }, `snapshots.lastDelta up to revision ${rev}`);
      expect(lastDelta).toMatchObject({ startRevision: rev, name: expect.stringMatching(/^Incr-/) });
      // Uncompressed: the event's JSON (the 1000-byte value in base64) plus the sha256 trailer.
      const deltaBytes = bytes(lastDelta.size);
      expect(deltaBytes).toBeGreaterThan(1000 + 32);
      expect(bytes(status().snapshots?.accumulatedDeltaSize)).toBe(deltaBytes);
    } finally {
      client.close();
    }
    expect(await s.stop()).toBe(0);
  });
});
