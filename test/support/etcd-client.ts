/**
 * EtcdClient for tests. Integration tests observe etcd with etcd3 clients of their own and hand the code
 * under test an EtcdClient (`ours`, `etcdClient`); unit tests script the few calls the code makes
 * (`fakeEtcdClient`).
 */
import { Etcd3 } from 'etcd3';
import { Etcd3Client, type EtcdClient } from '../../src/etcd/etcd-client.js';

/** The EtcdClient on a test's own etcd3 client: both share the connection, and closing either closes it. */
export function ours(raw: Etcd3): EtcdClient {
  return new Etcd3Client(raw);
}

/** An EtcdClient of `hosts` over plain HTTP/2, without credentials (the test etcds'). */
export function etcdClient(hosts: string | string[]): EtcdClient {
  return new Etcd3Client(new Etcd3({ hosts }));
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
    currentRevision: unexpected('currentRevision'),
    get: unexpected('get'),
    put: unexpected('put'),
    memberList: unexpected('memberList'),
    memberAdd: unexpected('memberAdd'),
    memberRemove: unexpected('memberRemove'),
    memberPromote: unexpected('memberPromote'),
    memberUpdate: unexpected('memberUpdate'),
    snapshot: unexpected('snapshot'),
    watchAllKeys: unexpected('watchAllKeys'),
    close: () => undefined,
    ...calls,
  };
}
