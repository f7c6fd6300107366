/**
 * EtcdClient, the project's one way to etcd, against a real etcd: the calls in the project's own types
 * (hex ids, numbers), the snapshot stream, and failures as EtcdError with a code and etcd's message.
 */
import { createHash } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { silentLogger } from '@etcdbrctl/snapstore';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectLocalEtcd, createEtcdClient } from '../../src/etcd/client.js';
import type { EtcdClient, LocalEtcdClient } from '../../src/etcd/etcd-client.js';
import { EtcdError, ETCD_UNREACHABLE_CODES, isEtcdError, toEtcdError } from '../../src/etcd/errors.js';
import { freePort } from '../../src/etcd/ports.js';
import { CompactedRevisionError } from '../../src/etcd/watch.js';
import { startTestEtcd, type TestEtcd } from '../support/etcd.js';
import { waitFor } from '../support/wait.js';

const plain = (endpoint: string) =>
  createEtcdClient({ endpoints: [endpoint], insecureTransport: true, insecureSkipVerify: false, connectionTimeoutMs: 2_000 });

async function rejection(p: Promise<unknown>): Promise<EtcdError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(EtcdError);
    return err as EtcdError;
  }
  throw new Error('expected the call to fail');
}

describe('EtcdClient on a running etcd', () => {
  let etcd: TestEtcd;
  let client: LocalEtcdClient;
  beforeAll(async () => {
    etcd = await startTestEtcd();
    client = await connectLocalEtcd(etcd.clientUrl);
  });
  afterAll(async () => {
    client?.close();
    await etcd?.cleanup();
  });

  it('status, member list, put/get and the current revision in our types', async () => {
    await client.put('/a', 'one');
    expect((await client.get('/a'))?.toString()).toBe('one');
    expect(await client.get('/missing')).toBeUndefined();
    const revision = await client.currentRevision(5_000);
    expect(revision).toBeGreaterThan(1);

    const st = await client.status({ timeoutMs: 5_000 });
    expect(st.memberId).toMatch(/^[0-9a-f]+$/);
    expect(st.leaderId).toBe(st.memberId);
    expect(st.clusterId).toMatch(/^[0-9a-f]+$/);
    expect(st.revision).toBe(revision);
    expect(st.raftTerm).toBeGreaterThan(0);
    expect(st.isLearner).toBe(false);
    expect(st.dbSize).toBeGreaterThan(0);
    expect(st.dbSizeInUse).toBeGreaterThan(0);
    expect(st.dbSizeInUse).toBeLessThanOrEqual(st.dbSize);
    expect(st.version).toMatch(/^3\./);

    const list = await client.memberList({ linearizable: true, timeoutMs: 5_000 });
    expect(list.memberId).toBe(st.memberId);
    expect(list.clusterId).toBe(st.clusterId);
    expect(list.members).toEqual([
      { id: st.memberId, name: 'default', peerUrls: [expect.any(String)], clientUrls: [etcd.clientUrl], isLearner: false },
    ]);
  });

  it('compaction, then a read or watch at a compacted revision fails with E_ETCD_COMPACTED', async () => {
    await client.put('/c', '1');
    const old = await client.currentRevision(5_000);
    await client.put('/c', '2');
    await client.compact(old + 1, { timeoutMs: 10_000 });
    const err = await rejection(client.compact(old, { timeoutMs: 10_000 }));
    expect(err.code).toBe('E_ETCD_COMPACTED');
    expect(err.message).toMatch(/required revision has been compacted/);
    const watchErr = await rejection(client.watchAllKeys(old, { onEvents: () => undefined, onError: () => undefined }));
    expect(watchErr).toBeInstanceOf(CompactedRevisionError);
    expect(watchErr.code).toBe('E_ETCD_COMPACTED');
  });

  it('the snapshot stream: the whole backend with its sha256 trailer, the revision in the first header', async () => {
    const revision = await client.currentRevision(5_000);
    const stream = await client.snapshot({ timeoutMs: 30_000 });
    const chunks: Buffer[] = [];
    let first: number | undefined;
    for await (const c of stream) {
      first ??= c.revision;
      chunks.push(c.blob);
    }
    const all = Buffer.concat(chunks);
    expect(all.length % 512).toBe(32);
    expect(createHash('sha256').update(all.subarray(0, -32)).digest().equals(all.subarray(-32))).toBe(true);
    // etcd 3.4 sends no revision; 3.5+ the one the snapshot holds.
    expect([0, revision]).toContain(first);
  });

  it('defragment, and the replay transaction path of a local client', async () => {
    await client.defragment({ timeoutMs: 30_000 });
    const txns = await client.openReplayTxns(silentLogger);
    try {
      const next = (await client.currentRevision(5_000)) + 1;
      expect(await txns.commit([{ request_put: { key: Buffer.from('/t'), value: Buffer.from('v') } }], next)).toBe(next);
    } finally {
      await txns.close();
    }
    expect((await client.get('/t'))?.toString()).toBe('v');
  });

  it('member add (as learner), update and remove', async () => {
    const peer = `http://127.0.0.1:${await freePort()}`;
    const added = await client.memberAdd([peer], { learner: true, timeoutMs: 5_000 });
    expect(added).toMatchObject({ id: expect.stringMatching(/^[0-9a-f]+$/), peerUrls: [peer], isLearner: true, name: '' });
    const other = `http://127.0.0.1:${await freePort()}`;
    await client.memberUpdate(added.id, [other], { timeoutMs: 5_000 });
    expect((await client.memberList()).members.find((m) => m.id === added.id)?.peerUrls).toEqual([other]);
    // A learner that never started is not in sync: etcd refuses to promote it, with its own message.
    const refused = await rejection(client.memberPromote(added.id, { timeoutMs: 5_000 }));
    expect(refused.message).toMatch(/can only promote a learner member which is in sync/);
    await client.memberRemove(added.id, { timeoutMs: 5_000 });
    expect((await client.memberList()).members.map((m) => m.id)).not.toContain(added.id);
  });

  it('a call after close() fails with E_ETCD_CLOSED', async () => {
    const c = await plain(etcd.clientUrl);
    await c.currentRevision(5_000);
    c.close();
    expect((await rejection(c.currentRevision(1_000))).code).toBe('E_ETCD_CLOSED');
  });
});

describe('EtcdClient failures', () => {
  it('nobody listening: E_ETCD_UNAVAILABLE', async () => {
    const c: EtcdClient = await plain(`http://127.0.0.1:${await freePort()}`);
    try {
      const err = await rejection(c.status({ timeoutMs: 5_000 }));
      expect(ETCD_UNREACHABLE_CODES.has(err.code)).toBe(true);
      expect(err.code).toBe('E_ETCD_UNAVAILABLE');
    } finally {
      c.close();
    }
  });

  it('aborting the signal cancels a pending defragmentation at once (shutdown must not hang on it)', async () => {
    // A peer that accepts connections and never answers: the call stays pending until cancelled.
    const sockets: Socket[] = [];
    let received = 0;
    const server = createServer((s) => {
      sockets.push(s);
      s.on('data', (d: Buffer) => (received += d.length));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const client = await plain(`http://127.0.0.1:${port}`);
    try {
      const stop = new AbortController();
      // Far beyond the test's own timeout: only the abort can end this call within it.
      const call = client.defragment({ timeoutMs: 3_600_000, signal: stop.signal });
      let settled = false;
      call.then(
        () => (settled = true),
        () => (settled = true),
      );
      await waitFor(() => received > 0, 'the call to reach the silent peer', 10_000, 10);
      expect(settled).toBe(false);
      stop.abort();
      const err = await rejection(call);
      expect(err.message).toMatch(/cancel|stopped/i);
    } finally {
      client.close();
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    }
  });

  it('toEtcdError: codes from the library error classes and grpc statuses, the message unchanged, no cause', () => {
    class GRPCDeadlineExceededError extends Error {}
    class BrokenCircuitError extends Error {}
    const cases: Array<[unknown, string]> = [
      [new GRPCDeadlineExceededError('4 DEADLINE_EXCEEDED: Deadline exceeded'), 'E_ETCD_TIMEOUT'],
      [new BrokenCircuitError('Execution prevented because the circuit breaker is open'), 'E_ETCD_CIRCUIT_OPEN'],
      [Object.assign(new Error('14 UNAVAILABLE: Connection dropped'), { code: 14 }), 'E_ETCD_UNAVAILABLE'],
      [new Error('etcdserver: mvcc: required revision has been compacted'), 'E_ETCD_COMPACTED'],
      [new Error('etcdserver: member not found'), 'E_ETCD_REQUEST'],
      ['a string', 'E_ETCD_REQUEST'],
    ];
    for (const [thrown, code] of cases) {
      const err = toEtcdError(thrown);
      expect(err.code).toBe(code);
      expect(err.message).toBe(thrown instanceof Error ? thrown.message : thrown);
      expect(err.cause).toBeUndefined();
    }
    const same = new EtcdError('E_ETCD_AUTH', 'x');
    expect(toEtcdError(same)).toBe(same);
    expect(isEtcdError(same, 'E_ETCD_AUTH')).toBe(true);
    expect(isEtcdError(same, 'E_ETCD_TIMEOUT')).toBe(false);
  });
});
