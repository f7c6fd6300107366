/** Peer URL update at server start (upstream `UpdateMemberPeerURL`). */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeClock, systemClock } from '../../src/clock.js';
import { ClusterMaintenance } from '../../src/cluster/maintenance.js';
import { defaultCommandConfig } from '../../src/config/build.js';
import { Metrics } from '../../src/metrics.js';
import {
  postWrapperStop,
  updatePeerUrlsIfChanged,
  updatePeerUrlsWhenReachable,
  wrapperStopUrl,
  type PeerUrlUpdateOptions,
} from '../../src/cluster/peer-url.js';
import { freePort } from '../../src/etcd/ports.js';
import { createTestPki, type TestPki } from '../support/certs.js';
import { startTestEtcd, type TestEtcd } from '../support/etcd.js';
import { etcdClient, ours } from '../support/etcd-client.js';
import { waitFor } from '../support/wait.js';
import { recordingLogger } from './maintenance-support.js';

/** Stands in for etcd-wrapper's port 9095: records requests, answers `status`. */
class FakeWrapper {
  readonly requests: Array<{ method: string; url: string }> = [];
  status = 200;
  constructor(readonly server: Server) {
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.requests.push({ method: req.method ?? '', url: req.url ?? '' });
      req.resume();
      res.statusCode = this.status;
      res.end();
    });
  }
  static async start(server: Server = createHttpServer()): Promise<FakeWrapper> {
    const w = new FakeWrapper(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return w;
  }
  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

describe('wrapperStopUrl', () => {
  it.each([
    ['https://etcd-main-local:2379', true, undefined, 'https://etcd-main-local:9095/stop'],
    ['http://127.0.0.1:2379', false, undefined, 'http://127.0.0.1:9095/stop'],
    ['127.0.0.1:2379', false, 1234, 'http://127.0.0.1:1234/stop'],
    ['https://[::1]:2379', true, undefined, 'https://[::1]:9095/stop'],
  ] as Array<[string, boolean, number | undefined, string]>)('%s tls=%s port=%s', (endpoint, tls, port, want) => {
    expect(wrapperStopUrl(endpoint, tls, port)).toBe(want);
  });
});

describe('updatePeerUrlsIfChanged against a real etcd member', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let wrapper: FakeWrapper;
  /** The same listener under another name: what the etcd config says after "the URL changed". */
  let otherPeerUrl: string;

  beforeAll(async () => {
    etcd = await startTestEtcd({ name: 'etcd-main-0' });
    client = new Etcd3({ hosts: etcd.clientUrl });
    wrapper = await FakeWrapper.start();
    otherPeerUrl = etcd.peerUrl.replace('127.0.0.1', 'localhost');
  });
  afterAll(async () => {
    client?.close();
    await wrapper?.close();
    await etcd?.cleanup();
  });
  beforeEach(() => {
    wrapper.requests.length = 0;
    wrapper.status = 200;
  });

  function options(
    configPeerUrls: string[],
    over: Partial<PeerUrlUpdateOptions> = {},
  ): PeerUrlUpdateOptions & { logger: ReturnType<typeof recordingLogger> } {
    return {
      client: ours(client),
      memberName: 'etcd-main-0',
      configPeerUrls,
      useEtcdWrapper: true,
      wrapperStopUrl: wrapperStopUrl(etcd.clientUrl, false, wrapper.port),
      timeoutMs: 2_000,
      retry: { attempts: 2, delayMs: 10 },
      clock: systemClock,
      ...over,
      logger: recordingLogger(),
    };
  }
  const peerUrls = async () => (await client.cluster.memberList({})).members[0]?.peerURLs;

  it('does nothing when the config matches the member (trailing slash and case do not count)', async () => {
    const result = await updatePeerUrlsIfChanged(options([`${etcd.peerUrl.replace('http://', 'HTTP://')}/`]));
    expect(result).toBe('unchanged');
    expect(wrapper.requests).toEqual([]);
    expect(await peerUrls()).toEqual([etcd.peerUrl]);
  });

  it('updates the member to the config URLs, then asks etcd-wrapper to restart etcd', async () => {
    const opts = options([otherPeerUrl]);
    expect(await updatePeerUrlsIfChanged(opts)).toBe('updated-restarted');
    expect(await peerUrls()).toEqual([otherPeerUrl]);
    expect(wrapper.requests).toEqual([{ method: 'POST', url: '/stop' }]);
    // The member still works (same listener under another name).
    await client.put('k').value('v');
  });

  it('without --use-etcd-wrapper: updates and warns that etcd must be restarted manually', async () => {
    const opts = options([etcd.peerUrl], { useEtcdWrapper: false });
    expect(await updatePeerUrlsIfChanged(opts)).toBe('updated');
    expect(await peerUrls()).toEqual([etcd.peerUrl]);
    expect(wrapper.requests).toEqual([]);
    expect(opts.logger.entries.some((e) => e.level === 'warn' && /restart etcd manually/.test(e.msg))).toBe(true);
  });

  it('fails when etcd-wrapper does not accept the stop request (after the update)', async () => {
    wrapper.status = 500;
    await expect(updatePeerUrlsIfChanged(options([otherPeerUrl]))).rejects.toThrow(/answered 500/);
    expect(await peerUrls()).toEqual([otherPeerUrl]);
    await updatePeerUrlsIfChanged(options([etcd.peerUrl], { useEtcdWrapper: false }));
  });

  it('skips a member that is not in the member list, and a config without URLs for it', async () => {
    expect(await updatePeerUrlsIfChanged(options([otherPeerUrl], { memberName: 'etcd-main-7' }))).toBe('member-not-found');
    expect(await updatePeerUrlsIfChanged(options([]))).toBe('no-config-urls');
    expect(await peerUrls()).toEqual([etcd.peerUrl]);
    expect(wrapper.requests).toEqual([]);
  });

  it('server start-up (ClusterMaintenance): URLs from the etcd config file, restart through etcd-wrapper on endpoints[0]', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-peer-url-'));
    try {
      const confPath = join(dir, 'etcd.conf.yaml');
      await writeFile(
        confPath,
        [
          'name: etcd-main-0',
          `initial-cluster: etcd-main-0=${otherPeerUrl}`,
          'initial-advertise-peer-urls:',
          `  etcd-main-0: ["${otherPeerUrl}"]`,
          'advertise-client-urls:',
          `  etcd-main-0: ["${etcd.clientUrl}"]`,
          '',
        ].join('\n'),
      );
      const config = defaultCommandConfig('server');
      config.etcdConnectionConfig.endpoints = [etcd.clientUrl];
      config.etcdConnectionConfig.connectionTimeout = 2_000;
      config.useEtcdWrapper = true;
      const logger = recordingLogger();
      const maintenance = new ClusterMaintenance({
        config,
        pod: podEnvironment({ POD_NAME: 'etcd-main-0', ETCD_CONF: confPath }),
        clock: systemClock,
        logger,
        metrics: new Metrics({ defaultMetrics: false }),
        wrapperPort: wrapper.port,
      });
      await maintenance.updatePeerUrls(new AbortController().signal);
      expect(await peerUrls()).toEqual([otherPeerUrl]);
      expect(wrapper.requests).toEqual([{ method: 'POST', url: '/stop' }]);
      expect(logger.entries.filter((e) => e.level === 'error')).toEqual([]);
    } finally {
      await updatePeerUrlsIfChanged(options([etcd.peerUrl], { useEtcdWrapper: false }));
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('waits for etcd to answer first, and gives up quietly when stopped', async () => {
    const unreachable = etcdClient(`http://127.0.0.1:${await freePort()}`);
    try {
      const stop = new AbortController();
      const clock = new FakeClock(0);
      const pending = updatePeerUrlsWhenReachable({
        ...options([otherPeerUrl]),
        client: unreachable,
        clock,
        pollMs: 50,
        signal: stop.signal,
      });
      // Each failed attempt leaves one poll timer on the clock; three attempts, then stop while it waits.
      for (let attempt = 1; attempt <= 3; attempt++) {
        await waitFor(() => clock.pending === 1, `failed attempt ${attempt} waiting to poll again`);
        if (attempt < 3) clock.advance(50);
      }
      stop.abort();
      expect(await pending).toBeUndefined();
      expect(clock.pending).toBe(0);
      expect(wrapper.requests).toEqual([]);
    } finally {
      unreachable.close();
    }
    expect(await updatePeerUrlsWhenReachable({ ...options([etcd.peerUrl]), pollMs: 50 })).toBe('unchanged');
  });
});

describe('postWrapperStop over TLS', () => {
  let pki: TestPki;
  beforeAll(async () => {
    pki = await createTestPki();
  });
  afterAll(async () => {
    await pki?.cleanup();
  });

  it('trusts the wrapper through --cacert, and refuses a server that CA did not sign', async () => {
    const server = createHttpsServer({ cert: await readFile(pki.server.certFile), key: await readFile(pki.server.keyFile) });
    const wrapper = await FakeWrapper.start(server);
    try {
      const url = wrapperStopUrl('https://127.0.0.1:2379', true, wrapper.port);
      await postWrapperStop(url, await readFile(pki.caFile), 2_000);
      expect(wrapper.requests).toEqual([{ method: 'POST', url: '/stop' }]);
      await expect(postWrapperStop(url, await readFile(pki.otherCaFile), 2_000)).rejects.toThrow(/restart etcd/);
    } finally {
      await wrapper.close();
    }
  });
});
