/**
 * The sidecar's Kubernetes parts take this member's peer TLS from the etcd config file, as upstream does
 * (every URL form, the legacy `<scheme>@<service>@<namespace>@<port>` template included), and from
 * `--initial-advertise-peer-urls` only without a usable file. Real fake-API requests, a real etcd for the
 * member identity.
 */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { buildCommandConfig } from '../../src/config/build.js';
import type { EtcdClient } from '../../src/etcd/index.js';
import { PEER_URL_TLS_ENABLED_ANNOTATION } from '../../src/k8s/member-lease.js';
import { wireKube, type KubeParts } from '../../src/server/wiring/kube.js';
import { startTestEtcd, type TestEtcd } from '../support/etcd.js';
import { etcdClient } from '../support/etcd-client.js';
import { LEASES } from '../support/fake-kube.js';
import { useFakeKube } from '../support/fake-kube-fixture.js';
import { silentLogger } from './support.js';

const NS = 'shoot--dev--one';
const POD = 'etcd-main-0';
const HEARTBEAT_MS = 1_000;

let etcd: TestEtcd;
let client: EtcdClient;
const k8s = useFakeKube();
let dir: string;
let parts: KubeParts | undefined;
let clock: FakeClock;

beforeAll(async () => {
  [etcd, dir] = await Promise.all([startTestEtcd(), mkdtemp(join(tmpdir(), 'etcdbr-kube-wiring-'))]);
  client = etcdClient(etcd.clientUrl);
  await writeFile(join(dir, 'kubeconfig'), k8s.fake.kubeconfig());
});
afterEach(async () => {
  await parts?.memberLease?.stop();
  parts = undefined;
});
afterAll(async () => {
  client?.close();
  await etcd?.cleanup();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Wires the Kubernetes parts with member lease renewal, runs one heartbeat, returns the lease's TLS annotation. */
async function wireAndBeat(
  etcdConf: string | undefined,
  peerUrlFlag: string,
): Promise<{ peerTLSEnabled: boolean; annotation: string | undefined }> {
  k8s.fake.seed(LEASES, { metadata: { name: POD, namespace: NS }, spec: {} });
  const config = buildCommandConfig('server', {
    flags: new Map<string, unknown>([
      ['enable-member-lease-renewal', true],
      ['k8s-heartbeat-duration', HEARTBEAT_MS],
      ['initial-advertise-peer-urls', [peerUrlFlag]],
    ]),
  }).config;
  config.etcdConnectionConfig.endpoints = [etcd.clientUrl];
  clock = new FakeClock('2026-11-25T00:00:00Z');
  const env = {
    KUBECONFIG: join(dir, 'kubeconfig'),
    POD_NAMESPACE: NS,
    POD_NAME: POD,
    ETCD_CONF: etcdConf ?? join(dir, 'no-such-file.yaml'),
  };
  parts = await wireKube({ config, env, pod: podEnvironment(env), client, latestFull: () => undefined, clock, logger: silentLogger });
  parts.memberLease!.start();
  await clock.advanceAsync(HEARTBEAT_MS);
  await parts.memberLease!.whenIdle();
  const lease = k8s.fake.read(LEASES, NS, POD) as { metadata: { annotations?: Record<string, string> } } | undefined;
  return { peerTLSEnabled: parts.peerTLSEnabled, annotation: lease?.metadata.annotations?.[PEER_URL_TLS_ENABLED_ANNOTATION] };
}

async function etcdConfig(name: string, lines: string[]): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, [`initial-cluster: ${POD}=https://${POD}.etcd-main-peer.${NS}.svc:2380`, ...lines, ''].join('\n'));
  return file;
}

describe('peer TLS of this member (member lease annotation, EtcdMember status)', () => {
  it('legacy template with https in the etcd config: true, whatever the flag says', async () => {
    const file = await etcdConfig('legacy-https.yaml', [`initial-advertise-peer-urls: https@etcd-main-peer@${NS}@2380`]);
    expect(await wireAndBeat(file, 'http://localhost:2380')).toEqual({ peerTLSEnabled: true, annotation: 'true' });
  });

  it('legacy template with http in the etcd config: false, whatever the flag says', async () => {
    const file = await etcdConfig('legacy-http.yaml', [`initial-advertise-peer-urls: http@etcd-main-peer@${NS}@2380`]);
    expect(await wireAndBeat(file, 'https://localhost:2380')).toEqual({ peerTLSEnabled: false, annotation: 'false' });
  });

  it('map of member name to URLs (current etcd-druid): this member’s URLs decide', async () => {
    const file = await etcdConfig('map.yaml', [
      'initial-advertise-peer-urls:',
      `  ${POD}: [https://${POD}.etcd-main-peer.${NS}.svc:2380]`,
      `  etcd-main-1: [http://etcd-main-1.etcd-main-peer.${NS}.svc:2380]`,
    ]);
    expect(await wireAndBeat(file, 'http://localhost:2380')).toEqual({ peerTLSEnabled: true, annotation: 'true' });
  });

  it('follows the file from heartbeat to heartbeat: druid turning peer TLS on, the file going away', async () => {
    const file = await etcdConfig('changing.yaml', [`initial-advertise-peer-urls: http@etcd-main-peer@${NS}@2380`]);
    expect(await wireAndBeat(file, 'https://localhost:2380')).toEqual({ peerTLSEnabled: false, annotation: 'false' });
    const annotation = async (): Promise<string | undefined> => {
      await clock.advanceAsync(HEARTBEAT_MS);
      await parts!.memberLease!.whenIdle();
      const lease = k8s.fake.read(LEASES, NS, POD) as { metadata: { annotations?: Record<string, string> } } | undefined;
      return lease?.metadata.annotations?.[PEER_URL_TLS_ENABLED_ANNOTATION];
    };
    expect(await annotation()).toBe('false'); // unchanged file: the same answer
    await etcdConfig('changing.yaml', [`initial-advertise-peer-urls: https@etcd-main-peer@${NS}@2380`]);
    expect(await annotation()).toBe('true');
    await rm(file);
    expect(await annotation()).toBe('true'); // the flag says https
    await etcdConfig('changing.yaml', [`initial-advertise-peer-urls: http@etcd-main-peer@${NS}@2380`]);
    expect(await annotation()).toBe('false');
  });

  it('without an etcd config file: --initial-advertise-peer-urls decides', async () => {
    expect(await wireAndBeat(undefined, 'https://localhost:2380')).toEqual({ peerTLSEnabled: true, annotation: 'true' });
  });
});
