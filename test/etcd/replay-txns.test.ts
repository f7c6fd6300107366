/**
 * The online replay's transaction path against a real etcd: the hand-encoded Txn requests land as the
 * revisions etcd3 would write, and a transaction etcd refuses fails with etcd's own message (the lean
 * client cannot decode it, so the full client takes over).
 */
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { LocalH2EtcdClient } from '../../src/etcd/h2-etcd-client.js';
import { openReplayTxns } from '../../src/etcd/replay-txns.js';
import { decodeTxnResponse, encodeTxnRequest, TxnWireError } from '../../src/etcd/txn-wire.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { startTestEtcd } from '../support/etcd.js';
import { recordingLogger } from '../restorer/support.js';

const put = (key: string, value: string | Buffer) => ({
  request_put: { key: Buffer.from(key), value: Buffer.isBuffer(value) ? value : Buffer.from(value) },
});
const del = (key: string) => ({ request_delete_range: { key: Buffer.from(key) } });

describe('replay transactions through the lean gRPC path', () => {
  const cleanups = cleanupAfterEach();

  async function setup(extraArgs: string[] = []) {
    const etcd = await startTestEtcd({ extraArgs });
    cleanups.push(() => etcd.cleanup());
    const client = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(async () => client.close());
    const logger = recordingLogger();
    const full = new LocalH2EtcdClient(etcd.clientUrl);
    cleanups.push(async () => full.close());
    const txns = await openReplayTxns(etcd.clientUrl, full, logger);
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

  it("a transaction etcd refuses fails with etcd's own message, through the full client that takes over", async () => {
    const { client, logger, txns, start } = await setup(['--max-request-bytes=4096']);
    expect(await txns.commit([put('/small', 'fits')], start + 1)).toBe(start + 1);
    await expect(txns.commit([put('/large', Buffer.alloc(20_000, 1))], start + 2)).rejects.toThrow(/request is too large/);
    expect(txns.path).toBe('client');
    expect(logger.warnings.some((w) => /failed on the lean gRPC path/.test(w))).toBe(true);
    // Nothing was applied, and the replay can go on (through etcd3) from where it was.
    expect(await txns.commit([put('/next', 'n')], start + 2)).toBe(start + 2);
    expect((await client.get('/large').exec()).kvs).toHaveLength(0);
  });

  it('the wire format: a request is one gRPC message; a response without a header revision or cut short is an error', () => {
    const req = encodeTxnRequest([put('/k', 'v'), del('/d')]);
    expect(req[0]).toBe(0);
    expect(req.readUInt32BE(1)).toBe(req.length - 5);
    expect(() => encodeTxnRequest([{}])).toThrow(TxnWireError);
    // TxnResponse{header{revision: 300}, succeeded: true}
    const ok = Buffer.from([0, 0, 0, 0, 7, 0x0a, 0x03, 0x18, 0xac, 0x02, 0x10, 0x01]);
    expect(decodeTxnResponse(ok)).toEqual({ revision: 300, succeeded: true });
    expect(() => decodeTxnResponse(Buffer.from([0, 0, 0, 0, 2, 0x10, 0x01]))).toThrow(/no header revision/);
    expect(() => decodeTxnResponse(Buffer.from([0, 0, 0, 0, 4, 0x0a, 0x03, 0x18, 0xac]))).toThrow(TxnWireError);
    expect(() => decodeTxnResponse(Buffer.from([1, 0, 0, 0, 0]))).toThrow(/not an uncompressed/);
  });
});
