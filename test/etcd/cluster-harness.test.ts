import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { waitFor } from '../support/wait.js';

describe('three-member test cluster', () => {
  let cluster: TestCluster | undefined;
  afterAll(async () => {
    await cluster?.cleanup();
  });

  it('forms a cluster with one leader and survives a member restart', async () => {
    cluster = await startTestCluster(3);
    const client = new Etcd3({ hosts: cluster.clientUrls() });
    try {
      await client.put('a').value('1');
      const members = await client.cluster.memberList({});
      expect(members.members.map((m) => m.name).sort()).toEqual(['etcd-main-0', 'etcd-main-1', 'etcd-main-2']);
      await cluster.stop('etcd-main-2');
      await client.put('b').value('2');
      await cluster.start('etcd-main-2', { state: 'existing' });
      const only2 = new Etcd3({ hosts: cluster.members[2]!.clientUrl });
      try {
        await waitFor(
          async () => (await only2.get('b').string()) === '2',
          'the restarted member to serve the write it missed',
          10_000,
          100,
        );
        expect(await only2.get('b').string()).toBe('2');
      } finally {
        only2.close();
      }
    } finally {
      client.close();
    }
  });
});
