/**
 * The sidecar as etcd-druid v0.37 runs it: the etcd config its ConfigMap holds and the arguments its
 * StatefulSet passes (no --name, --initial-cluster or --initial-advertise-peer-urls), on etcd 3.5, with the
 * store the Go tool v0.43.0 wrote.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freePort } from '../src/etcd/ports.js';
import { etcd35Binaries, ETCD35_BIN_DIR } from '../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { UPSTREAM_V043 } from '../test/support/fixtures.js';
import { localStoreFlags, startSidecar, type SidecarProcess } from './support/sidecar.js';
import { runWrapper, type ConfiguredEtcd } from './support/wrapper.js';

/** The member list as etcd's peer handler serves it to other members (`/members` on a peer URL). */
async function memberPeerUrls(peerUrl: string): Promise<Array<{ name: string; peerURLs: string[] }>> {
  const res = await fetch(`${peerUrl}/members`);
  const members = (await res.json()) as Array<{ name: string; peerURLs: string[] }>;
  return members.map(({ name, peerURLs }) => ({ name, peerURLs }));
}

describe('etcd-druid v0.37: a one-replica Etcd with an additional advertised peer URL', () => {
  let dir: string;
  let sidecar: SidecarProcess | undefined;
  let etcd: ConfiguredEtcd | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-druid037-'));
  });

  afterEach(async () => {
    await etcd?.stop();
    etcd = undefined;
    await sidecar?.stop('SIGKILL');
    sidecar = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  it('restores a lost data dir from the store: every key comes back and the member advertises both URLs', async () => {
    const clientPort = await freePort();
    const peerPort = await freePort();
    const extraPeerPort = await freePort();
    const dataDir = join(dir, 'var', 'new.etcd');
    const peer = `http://127.0.0.1:${peerPort}`;
    // An address on the loopback range that nothing listens on: a single member never dials its own peer URLs.
    const extraPeer = `http://127.0.0.2:${extraPeerPort}`;
    // What druid's prepareInitialCluster and getAdvertiseURLs write (internal/component/configmap/etcdconfig.go):
    // the member's name once per peer URL in initial-cluster, and both URLs in its advertise map.
    await writeFile(
      join(dir, 'etcd.conf.yaml'),
      [
        'name: etcd-config',
        `data-dir: ${dataDir}`,
        'metrics: basic',
        'snapshot-count: 75000',
        'enable-grpc-gateway: false',
        'quota-backend-bytes: 8589934592',
        'initial-cluster-token: etcd-cluster',
        'initial-cluster-state: new',
        `initial-cluster: etcd-main-0=${peer},etcd-main-0=${extraPeer}`,
        'auto-compaction-mode: periodic',
        'auto-compaction-retention: 30m',
        `listen-peer-urls: http://127.0.0.1:${peerPort}`,
        `listen-client-urls: http://127.0.0.1:${clientPort}`,
        'initial-advertise-peer-urls:',
        `  etcd-main-0: [${peer}, ${extraPeer}]`,
        'advertise-client-urls:',
        `  etcd-main-0: [http://127.0.0.1:${clientPort}]`,
        'next-cluster-version-compatible: true',
        '',
      ].join('\n'),
    );
    const store = join(dir, 'store');
    await cp(join(UPSTREAM_V043, 'gzip', 'snapstore'), store, { recursive: true });
    const expected = JSON.parse(await readFile(join(UPSTREAM_V043, 'gzip', 'expected.json'), 'utf8')) as EtcdDump;

    // The arguments druid v0.37's StatefulSet builder passes (internal/component/statefulset/builder.go),
    // with paths and ports of this test; no restoration identity flags.
    sidecar = await startSidecar(
      [
        `--data-dir=${dataDir}`,
        `--restoration-temp-snapshots-dir=${join(dir, 'var', 'restoration.temp')}`,
        ...localStoreFlags(store, join(dir, 'var', 'temp')),
        `--endpoints=http://127.0.0.1:${clientPort}`,
        '--insecure-transport=true',
        '--insecure-skip-tls-verify=true',
        '--etcd-connection-timeout=5m',
        '--schedule=0 0 1 1 *',
        '--delta-snapshot-period=20s',
        '--garbage-collection-policy=LimitBased',
        '--max-backups=7',
        '--compress-snapshots=true',
        '--compression-policy=gzip',
        '--auto-compaction-mode=periodic',
        '--auto-compaction-retention=30m',
        '--etcd-snapshot-timeout=15m',
        '--etcd-defrag-timeout=15m',
      ],
      {
        ETCD_CONF: join(dir, 'etcd.conf.yaml'),
        POD_NAME: 'etcd-main-0',
        POD_NAMESPACE: 'shoot--a--b',
        ETCD_BIN: join(ETCD35_BIN_DIR, 'etcd'),
      },
    );

    const run = await runWrapper(sidecar.url, { binaries: await etcd35Binaries(), workDir: join(dir, 'wrapper'), mode: 'full' });
    expect(run.handshake.ok, `${run.handshake.seen.join(' -> ')}\n${sidecar.logs()}`).toBe(true);
    etcd = run.etcd!;
    await etcd.ready();

    const got = await dumpEtcd(etcd.clientUrl);
    expect(got.revision).toBe(expected.revision);
    expect(got.kvs.map(({ lease: _l, ...r }) => r)).toEqual(expected.kvs.map(({ lease: _l, ...r }) => r));
    expect(await memberPeerUrls(peer)).toEqual([{ name: 'etcd-main-0', peerURLs: [peer, extraPeer].sort() }]);
    expect(sidecar.logs()).not.toContain('MultiNode');
  }, 120_000);
});
