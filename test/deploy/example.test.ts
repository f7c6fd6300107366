/**
 * deploy/example: the manifests must run as they are. Checked here without a cluster:
 * - the sidecar's arguments and environment go through the real CLI (`main`) up to the point where the
 *   server would start, with the pod's volumes laid out in a temp directory (config built, store resolved,
 *   credentials read from the backup Secret's keys);
 * - ports, hosts, paths and names agree between the ConfigMap, the StatefulSet, the Services, the Leases,
 *   the RBAC objects and the Dockerfile;
 * - the ServiceAccount, Role and RoleBinding are the ones etcd-druid v0.37.1 creates (test/support/etcd-druid-rbac.ts),
 *   and the EtcdMember rule lives apart, in optional/etcdmember-rbac.yaml;
 * - the sidecar's lease and EtcdMember calls run against the fake API server enforcing the Roles bound to the
 *   pods' ServiceAccount, seeded with the example's own Leases: under etcd-druid's Role alone every lease
 *   request is allowed and the EtcdMember calls stop after one refused request; with the optional Role too,
 *   everything is allowed.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { StoreConfig } from '@etcdbrctl/snapstore';
import type { CommandContext } from '../../src/config/context.js';
import { main } from '../../src/cli/main.js';
import { clearCreateAsLearner, CREATE_AS_LEARNER_ANNOTATION, readCreateAsLearner } from '../../src/k8s/etcd-member.js';
import { FakeClock } from '../../src/clock.js';
import { flagBindings } from '../../src/config/build.js';
import { COMMAND_SPECS } from '../../src/config/commands.js';
import type { ServerConfig } from '../../src/config/types.js';
import { DEFAULT_ETCD_CONFIG_PATH, memberName, parseInitialCluster, renderMemberConfig } from '../../src/config/etcd-config.js';
import type { EtcdConfigTemplate } from '../../src/config/etcd-config.js';
import { createKubeClient } from '../../src/k8s/client.js';
import { EtcdMemberAccess, ETCD_MEMBER_RBAC_RULES } from '../../src/k8s/etcd-member-access.js';
import { EtcdMemberStatusPublisher } from '../../src/cluster/member-status-publisher.js';
import { memberLeaseHasHolder, renewMemberLease } from '../../src/k8s/member-lease.js';
import { FullSnapshotLeaseRenewer, SnapshotLeases, snapshotLeaseHooks } from '../../src/k8s/snapshot-leases.js';
import { ETCD_MEMBERS, FakeKubeApiServer, LEASES, requestAttributes } from '../support/fake-kube.js';
import type { FakeRbac, PolicyRule, SeedObject } from '../support/fake-kube.js';
import { druidV037EtcdRbac } from '../support/etcd-druid-rbac.js';
import { deltaSnapshot, fullSnapshot, recordingLogger } from '../k8s/support.js';
import { parseDockerfile } from './dockerfile.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const EXAMPLE = join(ROOT, 'deploy', 'example');

// ------------------------------------------------------------------------------------------------
// The manifests, as loose Kubernetes objects

type Obj = Record<string, any>;

interface Manifest {
  file: string;
  obj: Obj;
}

function loadManifests(): Manifest[] {
  const kustomization = parseAllDocuments(readFileSync(join(EXAMPLE, 'kustomization.yaml'), 'utf8'))[0]!.toJS() as { resources: string[] };
  const out: Manifest[] = [];
  for (const file of kustomization.resources) {
    for (const doc of parseAllDocuments(readFileSync(join(EXAMPLE, file), 'utf8'))) {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`);
      const obj = doc.toJS() as Obj | null;
      if (obj !== null) out.push({ file, obj });
    }
  }
  return out;
}

const manifests = loadManifests();

function the(kind: string, name?: string): Obj {
  const found = manifests.filter((m) => m.obj.kind === kind && (name === undefined || m.obj.metadata?.name === name));
  if (found.length !== 1) throw new Error(`expected one ${kind}${name === undefined ? '' : ` ${name}`} in deploy/example, found ${found.length}`);
  return found[0]!.obj;
}

function all(kind: string): Obj[] {
  return manifests.filter((m) => m.obj.kind === kind).map((m) => m.obj);
}

const sts = the('StatefulSet');
const NS: string = the('Namespace').metadata.name;
const pod: Obj = sts.spec.template.spec;
const containers: Obj[] = pod.containers;
const wrapper = containers.find((c) => c.name === 'etcd')!;
const sidecar = containers.find((c) => c.name === 'backup-restore')!;
const replicas: number = sts.spec.replicas;
const podNames = Array.from({ length: replicas }, (_, i) => `${sts.metadata.name}-${i}`);
const role = the('Role');

/** `--name=value` arguments of a container (after the subcommand) as a map; every one must have that form. */
function flagMap(args: string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const a of args) {
    const m = /^--([a-z0-9-]+)=(.*)$/.exec(a);
    if (!m) throw new Error(`argument ${JSON.stringify(a)} is not --name=value`);
    if (out.has(m[1]!)) throw new Error(`--${m[1]} given twice`);
    out.set(m[1]!, m[2]!);
  }
  return out;
}

const sidecarFlags = flagMap(sidecar.args.slice(1));
const wrapperFlags = flagMap(wrapper.args.slice(1));

function port(container: Obj, name: string): number {
  const p = (container.ports as Obj[]).find((x) => x.name === name);
  if (p === undefined) throw new Error(`container ${container.name} has no port ${name}`);
  return p.containerPort;
}

function servicePort(service: Obj, name: string): Obj {
  const p = (service.spec.ports as Obj[]).find((x) => x.name === name);
  if (p === undefined) throw new Error(`service ${service.metadata.name} has no port ${name}`);
  return p;
}

function mountPathOf(container: Obj, volume: string): string {
  const m = (container.volumeMounts as Obj[]).find((v) => v.name === volume);
  if (m === undefined) throw new Error(`container ${container.name} does not mount ${volume}`);
  return (m.mountPath as string).replace(/\/$/, '');
}

function under(path: string, dir: string): boolean {
  return path === dir || path.startsWith(`${dir}/`);
}

function selects(selector: Record<string, string>, labels: Record<string, string>): boolean {
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

const configMapVolume = (pod.volumes as Obj[]).find((v) => v.configMap !== undefined)!;
const configMap = the('ConfigMap', configMapVolume.configMap.name);
const etcdConfig = parseAllDocuments(configMap.data['etcd.conf.yaml'])[0]!.toJS() as EtcdConfigTemplate;
const dataVolume: string = sts.spec.volumeClaimTemplates[0].metadata.name;
const dataMount = mountPathOf(sidecar, dataVolume);

// ------------------------------------------------------------------------------------------------

describe('deploy/example manifests', () => {
  it('lists every manifest in the kustomization and keeps all objects in one namespace', () => {
    const listed = new Set(manifests.map((m) => m.file));
    const files = readdirSync(EXAMPLE).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...listed].sort()).toEqual(files.sort());
    for (const { file, obj } of manifests) {
      if (obj.kind === 'Namespace') continue;
      expect(obj.metadata.namespace, `${file}: ${obj.kind} ${obj.metadata.name}`).toBe(NS);
    }
  });

  it('runs the sidecar image of this version, as the Dockerfile user etcd-druid also sets for the pod', () => {
    const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    expect(sidecar.image).toBe(`etcdbrctl:${version}`);
    expect(wrapper.image).toMatch(/^europe-docker\.pkg\.dev\/gardener-project\/public\/gardener\/etcd-wrapper:v\d+\.\d+\.\d+$/);
    const user = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8')).stages.at(-1)!.instructions.filter((i) => i.keyword === 'USER').at(-1)!.args;
    expect(`${pod.securityContext.runAsUser}:${pod.securityContext.runAsGroup}`).toBe(user);
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    expect(pod.securityContext.fsGroup).toBe(pod.securityContext.runAsGroup);
  });

  it('passes only flags etcdbrctl server defines, in the --name=value form etcd-druid writes', () => {
    expect(sidecar.args[0]).toBe('server');
    const known = flagBindings(COMMAND_SPECS.server);
    const unknown = [...sidecarFlags.keys()].filter((f) => !known.has(f));
    expect(unknown, 'flags etcdbrctl server does not know').toEqual([]);
    for (const f of ['enable-snapshot-lease-renewal', 'enable-member-lease-renewal', 'storage-provider', 'store-prefix', 'schedule', 'garbage-collection-policy', 'delta-snapshot-period', 'use-etcd-wrapper', 'etcd-connection-timeout', 'endpoints', 'service-endpoints', 'data-dir']) {
      expect(sidecarFlags.has(f), `--${f}`).toBe(true);
    }
  });

  it('joins the two containers over the local host name and the ports both sides use', () => {
    const local = `${sts.metadata.name}-local`;
    expect(pod.hostAliases).toEqual([{ ip: '127.0.0.1', hostnames: [local] }]);
    const serverPort = Number(sidecarFlags.get('server-port'));
    expect(port(sidecar, 'server')).toBe(serverPort);
    expect(wrapperFlags.get('backup-restore-host-port')).toBe(`${local}:${serverPort}`);
    expect(wrapperFlags.get('backup-restore-tls-enabled')).toBe('false');
    expect(wrapperFlags.get('etcd-server-name')).toBe(local);

    const endpoint = new URL(sidecarFlags.get('endpoints')!);
    expect(endpoint.protocol).toBe('http:');
    expect(endpoint.hostname).toBe(local);
    const clientPort = port(wrapper, 'client');
    expect(Number(endpoint.port)).toBe(clientPort);
    expect(Number(wrapperFlags.get('etcd-client-port'))).toBe(clientPort);
    expect(new URL(etcdConfig['listen-client-urls'] as string).port).toBe(String(clientPort));
    expect(new URL(etcdConfig['listen-peer-urls'] as string).port).toBe(String(port(wrapper, 'server')));

    // Multi-member: readiness from the wrapper's /readyz on the wrapper port.
    expect(replicas).toBeGreaterThan(1);
    expect(wrapper.readinessProbe.httpGet).toMatchObject({ path: '/readyz', port: Number(wrapperFlags.get('etcd-wrapper-port')) });
  });

  it('reaches the cluster through the client Service and the members through the headless peer Service', () => {
    const labels: Record<string, string> = sts.spec.template.metadata.labels;
    expect(selects(sts.spec.selector.matchLabels, labels)).toBe(true);
    const serviceEndpoint = new URL(sidecarFlags.get('service-endpoints')!);
    const client = the('Service', serviceEndpoint.hostname);
    expect(selects(client.spec.selector, labels)).toBe(true);
    expect(servicePort(client, 'client')).toMatchObject({ port: Number(serviceEndpoint.port), targetPort: port(wrapper, 'client') });
    expect(servicePort(client, 'server').targetPort).toBe(port(wrapper, 'server'));
    expect(servicePort(client, 'backuprestore').targetPort).toBe(port(sidecar, 'server'));

    const peer = the('Service', sts.spec.serviceName);
    expect(peer.spec.clusterIP).toBe('None');
    expect(peer.spec.publishNotReadyAddresses).toBe(true);
    expect(selects(peer.spec.selector, labels)).toBe(true);
    expect(servicePort(peer, 'peer').targetPort).toBe(port(wrapper, 'server'));

    for (const pdb of all('PodDisruptionBudget')) {
      expect(selects(pdb.spec.selector.matchLabels, labels)).toBe(true);
      expect(pdb.spec.minAvailable).toBe(Math.floor(replicas / 2) + 1);
    }
  });

  it('has an etcd config whose members are the pods, addressed through the peer Service', () => {
    const peerDomain = `${sts.spec.serviceName}.${NS}.svc`;
    const members = parseInitialCluster(etcdConfig['initial-cluster']);
    expect(members.map(([n]) => n)).toEqual(podNames);
    for (const [name, url] of members) {
      expect(url).toBe(`http://${name}.${peerDomain}:${port(wrapper, 'server')}`);
    }
    for (const podName of podNames) {
      const member = memberName(etcdConfig, podName);
      expect(member).toBe(podName);
      // What /config serves to this pod's etcd-wrapper (no cluster running yet).
      const rendered = renderMemberConfig(etcdConfig, podName, { existingMembers: [], learnerPresent: false });
      expect(rendered.name).toBe(podName);
      expect(rendered['initial-advertise-peer-urls']).toBe(`http://${podName}.${peerDomain}:${port(wrapper, 'server')}`);
      expect(rendered['advertise-client-urls']).toBe(`http://${podName}.${peerDomain}:${port(wrapper, 'client')}`);
      expect(rendered['initial-cluster-state']).toBe('new');
    }
  });

  it('puts the data dir, the temp dirs and the config file where the flags and the sidecar look', () => {
    expect(mountPathOf(wrapper, dataVolume)).toBe(dataMount);
    expect(etcdConfig['data-dir']).toBe(sidecarFlags.get('data-dir'));
    for (const f of ['data-dir', 'restoration-temp-snapshots-dir', 'snapstore-temp-directory']) {
      expect(under(sidecarFlags.get(f)!, dataMount), `--${f} on the data volume`).toBe(true);
    }
    // No ETCD_CONF: the sidecar reads the default path, which the ConfigMap volume provides.
    const env = sidecar.env as Obj[];
    expect(env.some((e) => e.name === 'ETCD_CONF')).toBe(false);
    const item = (configMapVolume.configMap.items as Obj[]).find((i) => i.key === 'etcd.conf.yaml')!;
    expect(`${mountPathOf(sidecar, configMapVolume.name)}/${item.path}`).toBe(DEFAULT_ETCD_CONFIG_PATH);
    // 0640 with fsGroup: readable by the non-root user.
    expect(configMapVolume.configMap.defaultMode).toBe(0o640);
  });

  it('mounts the backup Secret where AWS_APPLICATION_CREDENTIALS points', () => {
    const secretVolume = (pod.volumes as Obj[]).find((v) => v.secret !== undefined)!;
    const secret = the('Secret', secretVolume.secret.secretName);
    expect(Object.keys(secret.stringData).sort()).toEqual(['accessKeyID', 'region', 'secretAccessKey']);
    const credentialsDir = (sidecar.env as Obj[]).find((e) => e.name === 'AWS_APPLICATION_CREDENTIALS')!.value;
    expect(mountPathOf(sidecar, secretVolume.name)).toBe(credentialsDir);
  });

  it('creates the leases the sidecar renews, and binds the Role to the pods\' ServiceAccount', () => {
    const leaseNames = all('Lease').map((l) => l.metadata.name).sort();
    expect(leaseNames).toEqual([...podNames, sidecarFlags.get('full-snapshot-lease-name')!, sidecarFlags.get('delta-snapshot-lease-name')!].sort());
    const sa = the('ServiceAccount', pod.serviceAccountName);
    const binding = the('RoleBinding');
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role.metadata.name });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: NS }]);
  });
});

// ------------------------------------------------------------------------------------------------
// The sidecar's command line through the real CLI

describe('the sidecar command line', () => {
  let podRoot: string;

  beforeAll(async () => {
    podRoot = await mkdtemp(join(tmpdir(), 'etcdbr-example-pod-'));
  });
  afterAll(async () => {
    if (podRoot !== undefined) await rm(podRoot, { recursive: true, force: true });
  });

  /** A path of the container, moved under the temp pod root when it lies on one of the container's volumes. */
  function inPod(value: string): string {
    const mounts = (sidecar.volumeMounts as Obj[]).map((m) => (m.mountPath as string).replace(/\/$/, ''));
    return mounts.some((m) => under(value, m)) ? join(podRoot, value) : value;
  }

  it('builds the server config and resolves the S3 store from the arguments, env and Secret', async () => {
    // The kubelet's view of the volumes: the Secret's keys as files, the ConfigMap's item, an empty data dir.
    const secretVolume = (pod.volumes as Obj[]).find((v) => v.secret !== undefined)!;
    const secret = the('Secret', secretVolume.secret.secretName);
    const secretDir = join(podRoot, mountPathOf(sidecar, secretVolume.name));
    mkdirSync(secretDir, { recursive: true });
    for (const [k, v] of Object.entries(secret.stringData as Record<string, string>)) writeFileSync(join(secretDir, k), v);
    const configFile = join(podRoot, DEFAULT_ETCD_CONFIG_PATH);
    mkdirSync(dirname(configFile), { recursive: true });
    writeFileSync(configFile, configMap.data['etcd.conf.yaml']);
    mkdirSync(join(podRoot, dataMount), { recursive: true });

    const env: Record<string, string> = {};
    for (const e of sidecar.env as Obj[]) {
      if (e.value !== undefined) env[e.name] = inPod(e.value);
      else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') env[e.name] = podNames[0]!;
      else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') env[e.name] = NS;
      else throw new Error(`env ${e.name}: the test does not know its source`);
    }
    const args = sidecar.args.map((a: string) => a.replace(/^(--[a-z0-9-]+=)(\/.*)$/, (_: string, flag: string, path: string) => flag + inPod(path)));

    let captured: { config: ServerConfig; stores: CommandContext['stores'] } | undefined;
    let stdout = '';
    let stderr = '';
    const code = await main(
      args,
      env,
      { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } },
      {
        homeDir: podRoot,
        runners: {
          server: async (config, ctx) => {
            captured = { config, stores: ctx.stores };
            return 0;
          },
        },
      },
    );
    expect(stderr).not.toMatch(/error|warn/i);
    expect(code).toBe(0);
    expect(stdout).toBe('');
    const { config, stores } = captured!;
    expect(config.useEtcdWrapper).toBe(true);
    expect(config.healthConfig).toMatchObject({
      snapshotLeaseRenewalEnabled: true,
      memberLeaseRenewalEnabled: true,
      fullSnapshotLeaseName: sidecarFlags.get('full-snapshot-lease-name'),
      deltaSnapshotLeaseName: sidecarFlags.get('delta-snapshot-lease-name'),
      heartbeatDuration: 10_000,
    });
    expect(config.etcdConnectionConfig).toMatchObject({
      endpoints: [sidecarFlags.get('endpoints')],
      serviceEndpoints: [sidecarFlags.get('service-endpoints')],
      connectionTimeout: 5 * 60_000,
    });
    expect(config.snapshotterConfig).toMatchObject({
      schedule: '0 */24 * * *',
      deltaSnapshotPeriod: 5 * 60_000,
      garbageCollectionPolicy: 'LimitBased',
      maxBackups: 7,
      garbageCollectionPeriod: 12 * 3_600_000,
    });
    expect(config.restorationConfig.dataDir).toBe(inPod(sidecarFlags.get('data-dir')!));
    expect(config.serverConfig.port).toBe(port(sidecar, 'server'));
    const store = stores.primary as StoreConfig & { credentials?: { region?: string; accessKeyID?: string } };
    expect(store).toMatchObject({
      provider: 'S3',
      container: env.STORAGE_CONTAINER,
      prefix: `${sidecarFlags.get('store-prefix')}/v2`,
      tempDir: inPod(sidecarFlags.get('snapstore-temp-directory')!),
    });
    expect(store.credentials).toMatchObject({ region: secret.stringData.region, accessKeyID: secret.stringData.accessKeyID });
  });
});

// ------------------------------------------------------------------------------------------------
// RBAC

const optionalRbac: Obj[] = parseAllDocuments(readFileSync(join(EXAMPLE, 'optional', 'etcdmember-rbac.yaml'), 'utf8')).map((d) => {
  if (d.errors.length > 0) throw new Error(`optional/etcdmember-rbac.yaml: ${d.errors.map((e) => e.message).join('; ')}`);
  return d.toJS() as Obj;
});
const serviceAccount = the('ServiceAccount', pod.serviceAccountName);
const podUser = `system:serviceaccount:${NS}:${serviceAccount.metadata.name}`;

/** The Roles among `objects` that a RoleBinding binds to the pods' ServiceAccount: what RBAC grants the sidecar. */
function rolesOfPods(objects: Obj[]): FakeRbac {
  const roles = objects
    .filter((b) => b.kind === 'RoleBinding')
    .filter((b) => (b.subjects as Obj[]).some((x) => x.kind === 'ServiceAccount' && x.name === serviceAccount.metadata.name && x.namespace === NS))
    .map((b) => objects.find((r) => r.kind === 'Role' && r.metadata.name === b.roleRef.name && r.metadata.namespace === b.metadata.namespace))
    .filter((r): r is Obj => r !== undefined)
    .map((r) => ({ namespace: r.metadata.namespace as string, rules: r.rules as PolicyRule[] }));
  return { user: podUser, roles };
}

/** Every Kubernetes API method the sidecar's code calls, by client, from the sources. */
function kubeCallsInSources(): Set<string> {
  const calls = new Set<string>();
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith('.ts')) {
        const text = readFileSync(p, 'utf8');
        for (const m of text.matchAll(/\.(coordination|customObjects)\s*\.\s*(\w+)\s*\(/g)) calls.add(`${m[1]}.${m[2]}`);
      }
    }
  };
  walk(join(ROOT, 'src'));
  return calls;
}

/** What the replay below exercises; a new call in src/ must be added to it (and the Roles checked). */
const EXERCISED = new Set([
  'coordination.readNamespacedLease',
  'coordination.patchNamespacedLease',
  'customObjects.getNamespacedCustomObject',
  'customObjects.patchNamespacedCustomObject',
  'customObjects.patchNamespacedCustomObjectStatus',
]);

/** Every Kubernetes request the sidecar's code makes for a member, through its own client; returns the log. */
async function replaySidecarCalls(fake: FakeKubeApiServer, member: string) {
  const kube = await createKubeClient({ kind: 'server', server: fake.url });
  const clock = new FakeClock('2026-05-06T07:08:09.123Z');
  const logger = recordingLogger();

  // Member lease heartbeat (--enable-member-lease-renewal) and the initializer's "was I a member" read.
  await renewMemberLease({
    kube,
    namespace: NS,
    memberName: member,
    memberIdentity: async () => ({ memberId: '8e9e05c52164694d', clusterId: 'cdf818194e3a8c32', isLeader: false }),
    peerTLSEnabled: false,
    clock,
    logger,
    heartbeatMs: 10_000,
    timeoutMs: 5_000,
  });
  expect(await memberLeaseHasHolder(kube, { namespace: NS, name: member }, clock, 5_000)).toBe(true);

  // Snapshot leases (--enable-snapshot-lease-renewal) with the names the sidecar is given: after a full, after a
  // delta, and on a delta period that stored nothing.
  const leases = new SnapshotLeases({
    kube,
    namespace: NS,
    fullSnapshotLeaseName: sidecarFlags.get('full-snapshot-lease-name')!,
    deltaSnapshotLeaseName: sidecarFlags.get('delta-snapshot-lease-name')!,
    clock,
    logger,
  });
  const delta = deltaSnapshot(101, 120, clock.now());
  await leases.updateFull(fullSnapshot(100, clock.now()));
  const renewer = new FullSnapshotLeaseRenewer({ leases, latestFull: () => undefined, clock, logger });
  const hooks = snapshotLeaseHooks({ leases, renewer, latestDeltas: () => [delta], logger });
  await hooks.onSnapshot(delta);
  await hooks.onIdleDeltaPeriod(new AbortController().signal);

  // Scale-up: the create-as-learner annotation, read at bootstrap and cleared after promotion; and the
  // EtcdMember status (DEP-04): read the existing history, then merge-patch /status. One access check for all.
  const etcdMembers = new EtcdMemberAccess(kube, logger);
  const learner = await readCreateAsLearner(etcdMembers, { namespace: NS, name: member }, clock, 5_000);
  await clearCreateAsLearner(etcdMembers, { namespace: NS, name: member }, clock, 5_000);
  const publisher = new EtcdMemberStatusPublisher({ etcdMembers, namespace: NS, name: member, clusterSize: replicas, peerTLSEnabled: false, clock, logger });
  publisher.start();
  await publisher.whenIdle();
  await clock.advanceAsync(10 * 60_000);
  await publisher.stop();
  kube.close();
  return { logger, learner };
}

const attributes = (fake: FakeKubeApiServer) =>
  fake.requests.map((r) => {
    const a = requestAttributes(r.method, r.path, r.query);
    return { what: `${a.verb} ${a.apiGroup}/${a.subresource === '' ? a.resource : `${a.resource}/${a.subresource}`}`, status: r.status };
  });

describe('RBAC', () => {
  it('is what etcd-druid v0.37.1 creates for the etcd pods: the same ServiceAccount, Role and RoleBinding', () => {
    const druid = druidV037EtcdRbac(sts.metadata.name, NS);
    expect(serviceAccount).toEqual(druid.serviceAccount);
    expect(role).toEqual(druid.role);
    expect(the('RoleBinding')).toEqual(druid.roleBinding);
    expect(rolesOfPods(manifests.map((m) => m.obj)).roles).toEqual([{ namespace: NS, rules: druid.role.rules }]);
  });

  it('keeps the EtcdMember rule apart: optional/etcdmember-rbac.yaml, outside the kustomization, a Role of its own with exactly the rules the sidecar needs', () => {
    const kustomization = parseAllDocuments(readFileSync(join(EXAMPLE, 'kustomization.yaml'), 'utf8'))[0]!.toJS() as { resources: string[] };
    expect(kustomization.resources.filter((r) => r.includes('optional'))).toEqual([]);
    const optionalRole = optionalRbac.find((o) => o.kind === 'Role')!;
    const binding = optionalRbac.find((o) => o.kind === 'RoleBinding')!;
    expect(optionalRbac.map((o) => o.kind)).toEqual(['Role', 'RoleBinding']);
    for (const o of optionalRbac) expect(o.metadata.namespace).toBe(NS);
    // Not etcd-druid's Role: druid rewrites the rules of the Role it manages.
    expect(optionalRole.metadata.name).not.toBe(role.metadata.name);
    expect(optionalRole.rules).toEqual(ETCD_MEMBER_RBAC_RULES.map((r) => ({ apiGroups: [...r.apiGroups], resources: [...r.resources], verbs: [...r.verbs] })));
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: optionalRole.metadata.name });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: serviceAccount.metadata.name, namespace: NS }]);
  });

  it('knows every Kubernetes call in src/', () => {
    const unknown = [...kubeCallsInSources()].filter((c) => !EXERCISED.has(c));
    expect(unknown, 'calls this test does not replay: add them to replaySidecarCalls and check the Roles').toEqual([]);
  });

  describe('against a fake API server that enforces the Roles', () => {
    let fake: FakeKubeApiServer | undefined;
    afterEach(async () => {
      await fake?.stop();
      fake = undefined;
    });

    it('under etcd-druid v0.37.1 (its Role, no EtcdMember CRD): every lease request is allowed, nothing is created, EtcdMember calls end after one refused request and one log line', async () => {
      fake = await FakeKubeApiServer.start({ rbac: rolesOfPods(manifests.map((m) => m.obj)), omit: [ETCD_MEMBERS] });
      // The example's own leases, as kubectl apply would create them.
      for (const lease of all('Lease')) fake.seed(LEASES, lease as SeedObject);
      const { logger, learner } = await replaySidecarCalls(fake, podNames[2]!);
      const requests = attributes(fake);
      const leaseRequests = requests.filter((r) => r.what.endsWith('coordination.k8s.io/leases'));
      expect(leaseRequests.length).toBeGreaterThan(0);
      expect(leaseRequests.filter((r) => r.status !== 200), 'lease requests the Role refused or that failed').toEqual([]);
      expect(new Set(leaseRequests.map((r) => r.what))).toEqual(new Set(['get coordination.k8s.io/leases', 'patch coordination.k8s.io/leases']));
      expect(requests.filter((r) => r.what.startsWith('create ')), 'the sidecar creates nothing').toEqual([]);
      expect(requests.filter((r) => r.what.includes('etcdmembers'))).toEqual([{ what: 'get druid.gardener.cloud/etcdmembers', status: 403 }]);
      expect(learner).toBe(false);
      expect(logger.lines.filter((l) => l.msg.includes('EtcdMember')).map((l) => l.level)).toEqual(['info']);
      expect(logger.warnings()).toEqual([]);
    });

    it('with optional/etcdmember-rbac.yaml applied and the CRD installed: every EtcdMember call is allowed too, and every optional grant is used', async () => {
      const rbac = rolesOfPods([...manifests.map((m) => m.obj), ...optionalRbac]);
      expect(rbac.roles).toHaveLength(2);
      fake = await FakeKubeApiServer.start({ rbac });
      for (const lease of all('Lease')) fake.seed(LEASES, lease as SeedObject);
      fake.seed(ETCD_MEMBERS, {
        apiVersion: 'druid.gardener.cloud/v1alpha1',
        kind: 'EtcdMember',
        metadata: { name: podNames[2]!, namespace: NS, annotations: { [CREATE_AS_LEARNER_ANNOTATION]: 'true' } },
      });
      const { logger, learner } = await replaySidecarCalls(fake, podNames[2]!);
      expect(learner).toBe(true);
      const requests = attributes(fake);
      expect(requests.filter((r) => r.status !== 200)).toEqual([]);
      const used = new Set(requests.map((r) => r.what));
      expect(used).toEqual(
        new Set([
          'get coordination.k8s.io/leases',
          'patch coordination.k8s.io/leases',
          'get druid.gardener.cloud/etcdmembers',
          'patch druid.gardener.cloud/etcdmembers',
          'patch druid.gardener.cloud/etcdmembers/status',
        ]),
      );
      const optionalRole = optionalRbac.find((o) => o.kind === 'Role')!;
      const granted = (optionalRole.rules as Obj[]).flatMap((r) =>
        (r.apiGroups as string[]).flatMap((g) => (r.resources as string[]).flatMap((res) => (r.verbs as string[]).map((v) => `${v} ${g}/${res}`))),
      );
      expect(granted.filter((g) => !used.has(g)), 'optional grants nothing uses').toEqual([]);
      expect(fake.read(ETCD_MEMBERS, NS, podNames[2]!)?.status).toMatchObject({ transitions: [{ state: 'New' }] });
      expect(logger.warnings()).toEqual([]);
    });
  });
});
