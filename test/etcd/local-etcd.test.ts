import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestEtcd, type TestEtcd } from '../support/etcd.js';

describe('local etcd child process', () => {
  const started: TestEtcd[] = [];
  afterAll(async () => {
    await Promise.all(started.map((e) => e.cleanup()));
  });

  it('serves clients on a free loopback port and is gone after stop', async () => {
    const etcd = await startTestEtcd();
    started.push(etcd);
    expect(etcd.clientUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const client = new Etcd3({ hosts: etcd.clientUrl });
    try {
      await client.put('hello').value('world');
      expect(await client.get('hello').string()).toBe('world');
    } finally {
      client.close();
    }
    await etcd.stop();
    expect(() => process.kill(etcd.pid, 0)).toThrow();
  });

  it('reports why etcd failed to start, with its log', async () => {
    await expect(startTestEtcd({ extraArgs: ['--no-such-etcd-flag'] })).rejects.toThrow(/did not start[\s\S]*no-such-etcd-flag/);
  });
});
