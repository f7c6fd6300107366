/** The etcd config file (ETCD_CONF): the legacy URL template of older etcd-druid releases, and `/config`. */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { memberOpEndpoints } from '../../src/cluster/members.js';
import {
  clusterSize,
  EtcdConfigError,
  initialClusterMembers,
  memberUrls,
  parseLegacyUrlTemplate,
  peerUrlsUseTls,
  readEtcdConfigTemplate,
  renderMemberConfig,
  restoreIdentityFromConfig,
} from '../../src/config/etcd-config.js';
import { InitializationState } from '../../src/server/initialization.js';
import { registerInitRoutes } from '../../src/server/init-routes.js';
import { Resources, silentLogger, startServer } from '../server/support.js';

const res = new Resources();
afterEach(() => res.cleanup());

/** What older etcd-druid releases wrote into the etcd ConfigMap of a 3-member cluster. */
const LEGACY = {
  name: 'etcd-main',
  'data-dir': '/var/etcd/data/new.etcd',
  'initial-advertise-peer-urls': 'http@etcd-main-peer@shoot--dev--one@2380',
  'advertise-client-urls': 'https@etcd-main-client@shoot--dev--one@2379',
  'initial-cluster':
    'etcd-main-0=http://etcd-main-0.etcd-main-peer.shoot--dev--one.svc:2380,' +
    'etcd-main-1=http://etcd-main-1.etcd-main-peer.shoot--dev--one.svc:2380,' +
    'etcd-main-2=http://etcd-main-2.etcd-main-peer.shoot--dev--one.svc:2380',
};

describe('legacy URL template <scheme>@<service>@<namespace>@<port>', () => {
  it('parses the template and leaves URL lists and maps alone', () => {
    expect(parseLegacyUrlTemplate('k', 'http@etcd-main-peer@shoot--dev--one@2380')).toEqual({
      scheme: 'http',
      service: 'etcd-main-peer',
      namespace: 'shoot--dev--one',
      port: 2380,
    });
    expect(parseLegacyUrlTemplate('k', 'https://a:2379,https://b:2379')).toBeUndefined();
    expect(parseLegacyUrlTemplate('k', { 'etcd-0': ['https://a:2379'] })).toBeUndefined();
    expect(parseLegacyUrlTemplate('k', undefined)).toBeUndefined();
  });

  it.each([
    'http@svc@ns',
    'ftp@svc@ns@2379',
    'http@svc@ns@port',
    'http@svc@ns@70000',
    'http@Svc_1@ns@2379',
    'http@svc@ns@2379@extra',
    'http://user@host:2379',
  ])('refuses %s with an error naming the key and the accepted forms', (value) => {
    let caught: unknown;
    try {
      parseLegacyUrlTemplate('advertise-client-urls', value);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(EtcdConfigError);
    expect((caught as EtcdConfigError).code).toBe('E_ETCD_CONFIG');
    expect((caught as Error).message).toContain('advertise-client-urls');
    expect((caught as Error).message).toContain(JSON.stringify(value));
    expect((caught as Error).message).toContain('<http|https>@<service>@<namespace>@<port>');
  });

  it("expands to the pod's DNS name behind the service, per member, as upstream does", () => {
    expect(memberUrls(LEGACY, 'initial-advertise-peer-urls', 'etcd-main-1')).toEqual([
      'http://etcd-main-1.etcd-main-peer.shoot--dev--one.svc:2380',
    ]);
    expect(memberUrls(LEGACY, 'advertise-client-urls', 'etcd-main-2')).toEqual([
      'https://etcd-main-2.etcd-main-client.shoot--dev--one.svc:2379',
    ]);
    // With a member-name prefix the member name is not a host name: the pod name is used for the URL.
    expect(memberUrls(LEGACY, 'initial-advertise-peer-urls', 'main-etcd-main-1', 'etcd-main-1')).toEqual([
      'http://etcd-main-1.etcd-main-peer.shoot--dev--one.svc:2380',
    ]);
  });

  it('member operations reach the cluster through the client service the template names', () => {
    expect(memberOpEndpoints([], LEGACY)).toEqual(['https://etcd-main-client:2379']);
    expect(memberOpEndpoints(['https://given:2379'], LEGACY)).toEqual(['https://given:2379']);
  });

  it('a malformed template in a file: the error names the file, the line, the key and the accepted forms', async () => {
    const file = join(await res.tmpDir(), 'etcd.conf.yaml');
    await writeFile(
      file,
      ['name: etcd-main', 'data-dir: /var/etcd/data/new.etcd', '', 'initial-advertise-peer-urls: http@etcd-main-peer@2380', ''].join('\n'),
    );
    const template = await readEtcdConfigTemplate(file);
    const err = (() => {
      try {
        memberUrls(template, 'initial-advertise-peer-urls', 'etcd-main-0');
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(EtcdConfigError);
    expect((err as Error).message).toBe(
      `etcd config file ${file} line 4: initial-advertise-peer-urls: "http@etcd-main-peer@2380" is not a valid URL template; accepted are a URL list ` +
        `("https://host:2379,..."), a map of member name to URLs, or the legacy template "<http|https>@<service>@<namespace>@<port>"`,
    );
    // The same template as a plain object (not read from a file) still names the key.
    expect(() => memberUrls({ ...template }, 'initial-advertise-peer-urls', 'etcd-main-0')).toThrow(
      /^etcd config: initial-advertise-peer-urls: /,
    );
  });

  it('a file that is not YAML is an EtcdConfigError naming the file', async () => {
    const file = join(await res.tmpDir(), 'etcd.conf.yaml');
    await writeFile(file, 'name: [unclosed\n');
    await expect(readEtcdConfigTemplate(file)).rejects.toThrow(new RegExp(`^etcd config file ${file} is not valid YAML: `));
    await expect(readEtcdConfigTemplate(file)).rejects.toBeInstanceOf(EtcdConfigError);
  });

  it('peer TLS of this member follows its peer URLs in every form', () => {
    expect(peerUrlsUseTls(LEGACY, 'etcd-main-0')).toBe(false);
    expect(peerUrlsUseTls({ 'initial-advertise-peer-urls': 'https@etcd-main-peer@ns@2380' }, 'etcd-main-0')).toBe(true);
    const map = { 'initial-advertise-peer-urls': { 'etcd-main-0': ['https://a:2380'], 'etcd-main-1': ['http://b:2380'] } };
    expect(peerUrlsUseTls(map, 'etcd-main-0')).toBe(true);
    expect(peerUrlsUseTls(map, 'etcd-main-1')).toBe(false);
    expect(peerUrlsUseTls({ 'initial-advertise-peer-urls': 'https://a:2380,http://b:2380' }, 'etcd-main-0')).toBe(false);
    expect(peerUrlsUseTls({}, 'etcd-main-0')).toBeUndefined();
  });

  it('renderMemberConfig writes real URLs for this member', () => {
    const out = renderMemberConfig(LEGACY, 'etcd-main-0', { existingMembers: [], learnerPresent: false });
    expect(out['initial-advertise-peer-urls']).toBe('http://etcd-main-0.etcd-main-peer.shoot--dev--one.svc:2380');
    expect(out['advertise-client-urls']).toBe('https://etcd-main-0.etcd-main-client.shoot--dev--one.svc:2379');
    expect(out.name).toBe('etcd-main-0');
  });
});

/**
 * What etcd-druid v0.37 writes for an Etcd with `additionalAdvertisePeerURLs` (configmap/etcdconfig.go,
 * prepareInitialCluster and getAdvertiseURLs): the member's name once per peer URL.
 */
const DRUID_V037_EXTRA_PEER = {
  name: 'etcd-config',
  'initial-cluster': 'etcd-main-0=http://etcd-main-0.etcd-main-peer.ns.svc:2380,etcd-main-0=http://10.0.0.1:2380',
  'initial-advertise-peer-urls': { 'etcd-main-0': ['http://etcd-main-0.etcd-main-peer.ns.svc:2380', 'http://10.0.0.1:2380'] },
  'advertise-client-urls': { 'etcd-main-0': ['http://etcd-main-0.etcd-main-peer.ns.svc:2379'] },
};

describe('one member per name, several URLs per member (etcd types.NewURLsMap)', () => {
  it("counts distinct names, keeping each member's URLs in order", () => {
    expect(clusterSize(DRUID_V037_EXTRA_PEER)).toBe(1);
    expect([...initialClusterMembers(DRUID_V037_EXTRA_PEER['initial-cluster'])]).toEqual([
      ['etcd-main-0', ['http://etcd-main-0.etcd-main-peer.ns.svc:2380', 'http://10.0.0.1:2380']],
    ]);
    const three = 'a=http://a:2380,b=http://b:2380,a=http://a2:2380,c=http://c:2380,b=http://b:2380';
    expect(clusterSize({ 'initial-cluster': three })).toBe(3);
    expect(initialClusterMembers(three).get('b')).toEqual(['http://b:2380']);
    expect(clusterSize({})).toBe(0);
  });

  it('a single member with two peer URLs renders as a new single-member cluster advertising both', () => {
    const out = renderMemberConfig(DRUID_V037_EXTRA_PEER, 'etcd-main-0', { existingMembers: [], learnerPresent: true });
    expect(out['initial-cluster-state']).toBe('new');
    expect(out['initial-advertise-peer-urls']).toBe('http://etcd-main-0.etcd-main-peer.ns.svc:2380,http://10.0.0.1:2380');
    expect(out['initial-cluster']).toBe(DRUID_V037_EXTRA_PEER['initial-cluster']);
  });

  it('a restore takes the member name and every advertised peer URL from the config', () => {
    expect(restoreIdentityFromConfig(DRUID_V037_EXTRA_PEER, 'etcd-main-0')).toEqual({
      name: 'etcd-main-0',
      peerUrls: ['http://etcd-main-0.etcd-main-peer.ns.svc:2380', 'http://10.0.0.1:2380'],
      initialCluster: 'etcd-main-0=http://etcd-main-0.etcd-main-peer.ns.svc:2380,etcd-main-0=http://10.0.0.1:2380',
    });
    // The legacy template and a prefix resolve as everywhere else.
    expect(restoreIdentityFromConfig(LEGACY, 'etcd-main-1')?.peerUrls).toEqual([
      'http://etcd-main-1.etcd-main-peer.shoot--dev--one.svc:2380',
    ]);
    expect(restoreIdentityFromConfig({ 'member-name-prefix': 'p', 'initial-cluster': 'p-etcd-0=http://x:2380' }, 'etcd-0')).toEqual({
      name: 'p-etcd-0',
      peerUrls: ['http://x:2380'],
      initialCluster: 'p-etcd-0=http://x:2380',
    });
    // Not listed: the restoration flags apply.
    expect(restoreIdentityFromConfig(DRUID_V037_EXTRA_PEER, 'etcd-main-1')).toBeUndefined();
  });
});

describe('/config over HTTP', () => {
  async function serve(template: unknown, podName: string): Promise<{ url: string; file: string }> {
    const dir = await res.tmpDir();
    const file = join(dir, 'etcd.conf.yaml');
    await writeFile(file, stringify(template));
    const state = new InitializationState(async () => {}, silentLogger);
    const { url } = await startServer(res, {
      extraRoutes: (app) =>
        registerInitRoutes(app, {
          state,
          pod: podEnvironment({ ETCD_CONF: file, POD_NAME: podName }),
          clusterView: async () => ({ existingMembers: [], learnerPresent: false }),
        }),
    });
    return { url, file };
  }

  it('expands the legacy template, so etcd gets URLs it accepts', async () => {
    const { url } = await serve(LEGACY, 'etcd-main-2');
    const r = await fetch(`${url}/config`);
    expect(r.status).toBe(200);
    const body = parse(await r.text()) as Record<string, string>;
    expect(body['initial-advertise-peer-urls']).toBe('http://etcd-main-2.etcd-main-peer.shoot--dev--one.svc:2380');
    expect(body['advertise-client-urls']).toBe('https://etcd-main-2.etcd-main-client.shoot--dev--one.svc:2379');
    for (const v of Object.values(body)) if (typeof v === 'string') expect(v).not.toContain('@');
  });

  it('answers 500 naming the key and the accepted forms for a malformed template', async () => {
    const { url, file } = await serve({ ...LEGACY, 'advertise-client-urls': 'https@etcd-main-client@2379' }, 'etcd-main-0');
    const r = await fetch(`${url}/config`);
    expect(r.status).toBe(500);
    const text = await r.text();
    // `stringify` keeps the keys in order: advertise-client-urls is on the fourth line.
    expect(text).toContain(`etcd config file ${file} line 4: advertise-client-urls: "https@etcd-main-client@2379"`);
    expect(text).toContain('advertise-client-urls');
    expect(text).toContain('<http|https>@<service>@<namespace>@<port>');
  });
});
