/**
 * The all-keys watch against a real etcd: events arrive in order, and close() returns even when etcd
 * hangs and never confirms the cancel (the sidecar's shutdown waits on it).
 */
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { watchAllKeys } from '../../src/etcd/watch.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { startTestEtcd } from '../support/etcd.js';
import { waitFor } from '../support/wait.js';

describe('watchAllKeys', () => {
  const cleanups = cleanupAfterEach();

  it('delivers the writes after its start revision; close() returns although a stopped etcd never confirms it', async () => {
    const etcd = await startTestEtcd();
    cleanups.push(() => etcd.cleanup());
    const client = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(async () => client.close());
    await client.put('/before').value('x');
    const start = Number((await client.get('x').exec()).header.revision) + 1;
    const seen: DeltaEvent[] = [];
    const watch = await watchAllKeys(
      client,
      start,
      { onEvents: (evs) => seen.push(...evs), onError: () => undefined },
      { cancelTimeoutMs: 300 },
    );
    await client.put('/a').value('1');
    await client.delete().key('/a');
    await waitFor(async () => (seen.length === 2 ? true : undefined), 'two watch events');
    expect(seen.map((e) => [e.type, e.key.toString(), e.modRevision])).toEqual([
      ['PUT', '/a', start],
      ['DELETE', '/a', start + 1],
    ]);
    process.kill(etcd.pid, 'SIGSTOP');
    cleanups.push(async () => process.kill(etcd.pid, 'SIGCONT'));
    // Without the bound this never settles (etcd3 waits for etcd's cancel confirmation) and the test times out.
    await expect(watch.close()).resolves.toBeUndefined();
  });
});
