/**
 * The one fake-kube fixture: a test file (or describe block) calls `useFakeKube()` once and gets one
 * FakeKubeApiServer with a client on it, started before its tests, emptied before each test (objects,
 * injected failures and stalls, recorded requests; then `seed` runs again), and stopped after them, also
 * when a test fails. Files that start the sidecar as a process write `fake.kubeconfig()` where it reads it.
 */
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { createKubeClient, type KubeClient } from '../../src/k8s/client.js';
import { FakeKubeApiServer, type FakeKubeOptions } from './fake-kube.js';

export interface FakeKubeFixture {
  /** The running fake API server (only inside hooks and tests). */
  readonly fake: FakeKubeApiServer;
  /** A client connected straight to `fake.url` (only inside hooks and tests). */
  readonly kube: KubeClient;
}

export interface UseFakeKubeOptions extends FakeKubeOptions {
  /** What every test starts with, e.g. the leases etcd-druid creates. */
  seed?: (fake: FakeKubeApiServer) => void;
}

/** The fake API server and a client connected straight to its URL; the caller stops `fake`. */
export async function startFakeKubeWithClient(opts: FakeKubeOptions = {}): Promise<{ fake: FakeKubeApiServer; kube: KubeClient }> {
  const fake = await FakeKubeApiServer.start(opts);
  try {
    return { fake, kube: await createKubeClient({ kind: 'server', server: fake.url, ...(opts.token ? { token: opts.token } : {}) }) };
  } catch (err) {
    await fake.stop();
    throw err;
  }
}

export function useFakeKube(opts: UseFakeKubeOptions = {}): FakeKubeFixture {
  const { seed, ...serverOpts } = opts;
  let started: { fake: FakeKubeApiServer; kube: KubeClient } | undefined;
  const get = (): { fake: FakeKubeApiServer; kube: KubeClient } => {
    if (!started) throw new Error('useFakeKube: the fake API server runs only inside hooks and tests');
    return started;
  };
  beforeAll(async () => {
    started = await startFakeKubeWithClient(serverOpts);
  });
  afterAll(async () => {
    await started?.fake.stop();
    started = undefined;
  });
  beforeEach(() => {
    const { fake } = get();
    fake.reset();
    seed?.(fake);
  });
  return {
    get fake() {
      return get().fake;
    },
    get kube() {
      return get().kube;
    },
  };
}
