/**
 * The online replay's transactions against a real etcd: each revision's operations land as one transaction
 * on the lean path, at the revisions etcd3 would write; a transaction etcd refuses fails with etcd's own
 * message (the lean client cannot decode it, so the one transport takes over) and the replay can go on; a
 * stalled etcd fails the commit at the per-call deadline, and the restore's stop ends it at once with the
 * stop's reason.
 */
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { connectLocalEtcd } from '../../src/etcd/index.js';
import { openReplayTxns } from '../../src/restorer/replay-txns.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { startTestEtcd } from '../support/etcd.js';
import { recordingLogger } from './support.js';

const put = (key: string, value: string | Buffer) => ({
  request_put: { key: Buffer.from(key), value: Buffer.isBuffer(value) ? value : Buffer.from(value) },
});
const del = (key: string) => ({ request_delete_range: { key: Buffer.from(key) } });

describe('replay transactions', () => {
  const cleanups = cleanupAfterEach();

  async function setup(extraArgs: string[] = [], opts: { signal?: AbortSignal; callTimeoutMs?: number } = {}) {
    const etcd = await startTestEtcd({ extraArgs });
    cleanups.push(() => etcd.cleanup());
    const client = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(async () => client.close());
    const local = await connectLocalEtcd(etcd.clientUrl);
    cleanups.push(async () => local.close());
    const logger = recordingLogger();
    const txns = await openReplayTxns(local, logger, opts);
    cleanups.push(() => txns.close());
    const start = Number((await client.get('x').exec()).header.revision);
    return { etcd, client, logger, txns, start };
  }

  it('writes each revision as one transaction: puts, empty and binary values, deletes, several ops at once', async () => {
    const { client, txns, start } = await setup();
    expect(txns.path).toBe('lean');
    expect(await txns.commit([put('/a', 'one')], start + 1)).toBe(start + 1);
    expect(await txns.commit([put('/b', Buffer.alloc(0)), put('/c', Buffer.from([0, 0xff, 0x80]))], start + 2)).toBe(start + 2);
    expect(await txns.commit([put('/a', 'two'), del('/b')], start + 3)).toBe(start + 3);
    const big = Buffer.alloc(200_000, 0x5a);
    expect(await txns.commit([put('/big', big)], start + 4)).toBe(start + 4);
    const kvs = (await client.getAll().prefix('/').exec()).kvs.map((kv) => [
      kv.key.toString(),
      kv.value.length === 0 ? '' : kv.value.toString('hex'),
      kv.mod_revision,
      kv.version,
    ]);
    expect(kvs).toEqual([
      ['/a', Buffer.from('two').toString('hex'), String(start + 3), '2'],
      ['/big', big.toString('hex'), String(start + 4), '1'],
      ['/c', '00ff80', String(start + 2), '1'],
    ]);
    expect(txns.path).toBe('lean');
  });

  it("a transaction etcd refuses fails with etcd's own message, through the one transport that takes over", async () => {
    const { client, logger, txns, start } = await setup(['--max-request-bytes=4096']);
    expect(await txns.commit([put('/small', 'fits')], start + 1)).toBe(start + 1);
    await expect(txns.commit([put('/large', Buffer.alloc(20_000, 1))], start + 2)).rejects.toThrow(/request is too large/);
    expect(txns.path).toBe('client');
    expect(logger.warnings.some((w) => /failed on the lean gRPC path/.test(w))).toBe(true);
    // Nothing was applied, and the replay can go on from where it was.
    expect(await txns.commit([put('/next', 'n')], start + 2)).toBe(start + 2);
    expect((await client.get('/large').exec()).kvs).toHaveLength(0);
  });

  it('a stalled etcd fails the commit at the deadline; a stop ends it at once with its reason', async () => {
    const stop = new AbortController();
    const { etcd, txns, start } = await setup([], { signal: stop.signal, callTimeoutMs: 300 });
    expect(await txns.commit([put('/a', '1')], start + 1)).toBe(start + 1);
    process.kill(etcd.pid, 'SIGSTOP');
    try {
      await expect(txns.commit([put('/b', '2')], start + 2)).rejects.toMatchObject({
        code: 'E_UNAVAILABLE',
        message: `the replay etcd did not commit revision ${start + 2} within 300 ms (stalled or overloaded): stopping the restore`,
      });
      const reason = new Error('stopped by the test');
      const pending = txns.commit([put('/c', '3')], start + 2);
      stop.abort(reason);
      await expect(pending).rejects.toBe(reason);
    } finally {
      process.kill(etcd.pid, 'SIGCONT');
    }
  });
});
