/**
 * EtcdClient for tests. Integration tests observe etcd with etcd3 clients of their own (a client apart from
 * the code under test) and hand the code
 * under test an EtcdClient (`ours`, `etcdClient`); unit tests script the few calls the code makes
 * (`fakeEtcdClient`).
 */
import type { Etcd3 } from 'etcd3';
import type { EtcdClient } from '../../src/etcd/index.js';
import { GrpcEtcdClient } from '../../src/etcd/calls.js';

/**
 * The project's EtcdClient to the etcd a test's own etcd3 client talks to (plain HTTP/2, its credentials);
 * closing the etcd3 client closes it too, so a test's one cleanup covers both.
 */
export function ours(raw: Etcd3): EtcdClient {
  const { hosts, auth } = (
    raw as unknown as { pool: { options: { hosts: string | string[]; auth?: { username: string; password: string } } } }
  ).pool.options;
  const client = new GrpcEtcdClient({ endpoints: typeof hosts === 'string' ? [hosts] : hosts }, auth);
  const closeRaw = raw.close.bind(raw);
  raw.close = () => {
    client.close();
    closeRaw();
  };
  return client;
}

/** An EtcdClient of `hosts` over plain HTTP/2, without credentials (the test etcds'). */
export function etcdClient(hosts: string | string[]): EtcdClient {
  return new GrpcEtcdClient({ endpoints: typeof hosts === 'string' ? [hosts] : hosts });
}

/**
 * An EtcdClient that answers the given calls; any other call fails (naming it), so a test notices when the
 * code under test starts to use etcd differently. close() does nothing unless given.
 */
export function fakeEtcdClient(calls: Partial<EtcdClient>): EtcdClient {
  const unexpected = (name: string) => () => Promise.reject(new Error(`fake EtcdClient: unexpected call of ${name}`));
  return {
    status: unexpected('status'),
    defragment: unexpected('defragment'),
    compact: unexpected('compact'),
    hashKv: unexpected('hashKv'),
    currentRevision: unexpected('currentRevision'),
    get: unexpected('get'),
    put: unexpected('put'),
    memberList: unexpected('memberList'),
    memberAdd: unexpected('memberAdd'),
    memberRemove: unexpected('memberRemove'),
    memberPromote: unexpected('memberPromote'),
    memberUpdate: unexpected('memberUpdate'),
    leaseTimeToLive: unexpected('leaseTimeToLive'),
    snapshot: unexpected('snapshot'),
    watchAllKeys: unexpected('watchAllKeys'),
    close: () => undefined,
    ...calls,
  };
}
