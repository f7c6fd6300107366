/**
 * EtcdClient, the project's one way to etcd (GrpcEtcdClient: node:http2 with code generated from etcd's .proto files), against a
 * real etcd, made the ways the project makes it (createEtcdClient from flags, connectLocalEtcd for a local
 * etcd, the class itself): every call in the project's types, the snapshot stream, the replay transactions of
 * a local client, the all-keys watch (compacted start, re-established after the connection breaks, bounded
 * close), deadlines, cancellation, fail-over between endpoints, and failures as EtcdError with a code and
 * etcd's message.
 */
import { createHash } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { connectLocalEtcd, createEtcdClient } from '../../src/etcd/index.js';
import type { EtcdClient, LocalEtcdClient } from '../../src/etcd/index.js';
import { EtcdError, ETCD_UNREACHABLE_CODES, etcdErrorFromStatus, isEtcdError } from '../../src/etcd/errors.js';
import { GrpcEtcdClient } from '../../src/etcd/calls.js';
import { freePort } from '../../src/etcd/ports.js';
import { CompactedRevisionError } from '../../src/etcd/watch.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { startTestEtcd, type TestEtcd } from '../support/etcd.js';
import { waitFor } from '../support/wait.js';

/** A client as the CLI makes one from its flags. */
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

/** A TCP proxy to `target` whose connections can be cut, and new ones refused, at will. */
async function startProxy(target: URL): Promise<{ url: string; cut(): void; block(on: boolean): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let blocked = false;
  const server: Server = createServer((s) => {
    if (blocked) return s.destroy();
    const up = connect(Number(target.port), target.hostname);
    sockets.add(s).add(up);
    s.pipe(up).pipe(s);
    const end = () => {
      s.destroy();
      up.destroy();
      sockets.delete(s);
      sockets.delete(up);
    };
    s.on('error', end).on('close', end);
    up.on('error', end).on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    cut: () => sockets.forEach((s) => s.destroy()),
    block: (on) => (blocked = on),
    close: async () => {
      sockets.forEach((s) => s.destroy());
      await new Promise((r) => server.close(r));
    },
  };
}

/** A peer that accepts connections and never answers; counts the bytes it got. */
async function startSilentPeer(): Promise<{ url: string; received(): number; close(): Promise<void> }> {
  const sockets: Socket[] = [];
  let received = 0;
  const server = createServer((s) => {
    sockets.push(s);
    s.on('data', (d: Buffer) => (received += d.length));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    received: () => received,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
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
  const cleanups = cleanupAfterEach();

  it('status, member list, put/get and the current revision in our types', async () => {
    await client.put('/a', 'one');
    await client.put('/bin', Buffer.from([0, 1, 2, 255]));
    expect((await client.get('/a'))?.toString()).toBe('one');
    expect(await client.get('/bin')).toEqual(Buffer.from([0, 1, 2, 255]));
    expect(await client.get('/missing')).toBeUndefined();
    const revision = await client.currentRevision(5_000);
    expect(revision).toBeGreaterThan(2);

    const st = await client.status({ timeoutMs: 5_000 });
    expect(st.memberId).toMatch(/^[0-9a-f]+$/);
    expect(st.leaderId).toBe(st.memberId);
    expect(st.clusterId).toMatch(/^[0-9a-f]+$/);
    expect(st.revision).toBe(revision);
    expect(st.raftTerm).toBeGreaterThan(0);
    expect(st.raftIndex).toBeGreaterThan(0);
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

  it('compaction, then a compaction or watch at a compacted revision fails with E_ETCD_COMPACTED', async () => {
    await client.put('/c', '1');
    const old = await client.currentRevision(5_000);
    await client.put('/c', '2');
    await client.compact(old + 1, { timeoutMs: 10_000 });
    const err = await rejection(client.compact(old, { timeoutMs: 10_000 }));
    expect(err.code).toBe('E_ETCD_COMPACTED');
    expect(err.message).toMatch(/required revision has been compacted/);
    let errors = 0;
    const watchErr = await rejection(client.watchAllKeys(old, { onEvents: () => undefined, onError: () => errors++ }));
    expect(watchErr).toBeInstanceOf(CompactedRevisionError);
    expect(watchErr.code).toBe('E_ETCD_COMPACTED');
    expect(errors).toBe(0);
  });

  it('the snapshot stream: the whole backend with its sha256 trailer, the revision in the first header', async () => {
    // Enough data for many messages (etcd sends 32 KiB each).
    for (let i = 0; i < 20; i++) await client.put(`/big/${i}`, Buffer.alloc(50_000, i));
    const revision = await client.currentRevision(5_000);
    const stream = await client.snapshot({ timeoutMs: 30_000 });
    const chunks: Buffer[] = [];
    let first: number | undefined;
    for await (const c of stream) {
      first ??= c.revision;
      chunks.push(c.blob);
    }
    expect(chunks.length).toBeGreaterThan(10);
    const all = Buffer.concat(chunks);
    expect(all.length % 512).toBe(32);
    expect(createHash('sha256').update(all.subarray(0, -32)).digest().equals(all.subarray(-32))).toBe(true);
    // etcd 3.4 sends no revision; 3.5+ the one the snapshot holds.
    expect([0, revision]).toContain(first);
  });

  it('a snapshot loop that stops early cancels the stream; the client goes on working', async () => {
    const stream = await client.snapshot({ timeoutMs: 30_000 });
    for await (const c of stream) {
      expect(c.blob.length).toBeGreaterThan(0);
      break;
    }
    stream.cancel();
    expect(await client.currentRevision(5_000)).toBeGreaterThan(0);
  });

  it('defragment, and the replay transactions of a local client', async () => {
    await expect(client.defragment({ timeoutMs: 30_000 })).resolves.toBeUndefined();
    const next = (await client.currentRevision(5_000)) + 1;
    expect(await client.txn([{ request_put: { key: Buffer.from('/t'), value: Buffer.from('v') } }], { timeoutMs: 5_000 })).toBe(next);
    expect((await client.get('/t'))?.toString()).toBe('v');
  });

  it('member add (as learner), update and remove with 64-bit hex ids', async () => {
    const peer = `http://127.0.0.1:${await freePort()}`;
    const added = await client.memberAdd([peer], { learner: true, timeoutMs: 5_000 });
    expect(added).toMatchObject({ id: expect.stringMatching(/^[0-9a-f]+$/), peerUrls: [peer], isLearner: true, name: '' });
    const other = `http://127.0.0.1:${await freePort()}`;
    await client.memberUpdate(added.id, [other], { timeoutMs: 5_000 });
    expect((await client.memberList()).members.find((m) => m.id === added.id)?.peerUrls).toEqual([other]);
    const refused = await rejection(client.memberPromote(added.id, { timeoutMs: 5_000 }));
    expect(refused.code).toBe('E_ETCD_REQUEST');
    expect(refused.message).toMatch(/can only promote a learner member which is in sync/);
    await client.memberRemove(added.id, { timeoutMs: 5_000 });
    expect((await client.memberList()).members.map((m) => m.id)).not.toContain(added.id);
    const gone = await rejection(client.memberRemove(added.id, { timeoutMs: 5_000 }));
    expect(gone.message).toMatch(/member not found/);
  });

  it('watch: the events after the start revision, again after the connection broke (none lost or repeated)', async () => {
    const proxy = await startProxy(new URL(etcd.clientUrl));
    cleanups.push(() => proxy.close());
    const watching = new GrpcEtcdClient({ endpoints: [proxy.url] });
    cleanups.push(async () => watching.close());
    const start = (await client.currentRevision(5_000)) + 1;
    const seen: DeltaEvent[] = [];
    const errors: Error[] = [];
    const headers: number[] = [];
    const watch = await watching.watchAllKeys(start, {
      onEvents: (evs) => seen.push(...evs),
      onError: (e) => errors.push(e),
      onHeader: (rev) => headers.push(rev),
    });
    expect(headers.length).toBeGreaterThan(0);
    await client.put('/w', '1');
    await waitFor(() => (seen.length === 1 ? true : undefined), 'the first event');
    proxy.block(true);
    proxy.cut();
    await client.put('/w', '2');
    await client.put('/x', '3');
    proxy.block(false);
    await waitFor(() => (seen.length >= 3 ? true : undefined), 'the events written while the connection was down');
    await client.put('/w', '4');
    await waitFor(() => (seen.length >= 4 ? true : undefined), 'the event after the reconnect');
    expect(seen.map((e) => [e.type, e.key.toString(), e.value.toString(), e.modRevision])).toEqual([
      ['PUT', '/w', '1', start],
      ['PUT', '/w', '2', start + 1],
      ['PUT', '/x', '3', start + 2],
      ['PUT', '/w', '4', start + 3],
    ]);
    expect(seen[1]).toMatchObject({ createRevision: start, version: 2, lease: '0' });
    expect(errors).toEqual([]);
    await watch.close();
  });

  it('watch: close() returns although a stopped etcd never confirms it', async () => {
    const own = await startTestEtcd();
    cleanups.push(() => own.cleanup());
    const c = new GrpcEtcdClient({ endpoints: [own.clientUrl] });
    cleanups.push(async () => c.close());
    await c.put('/d', 'x');
    const start = (await c.currentRevision(5_000)) + 1;
    const seen: DeltaEvent[] = [];
    const watch = await c.watchAllKeys(start, { onEvents: (evs) => seen.push(...evs), onError: () => undefined }, { cancelTimeoutMs: 300 });
    await c.put('/d', 'y');
    await waitFor(() => (seen.length === 1 ? true : undefined), 'the put event');
    expect(seen[0]).toMatchObject({ type: 'PUT', version: 2 });
    process.kill(own.pid, 'SIGSTOP');
    cleanups.push(async () => process.kill(own.pid, 'SIGCONT'));
    await expect(watch.close()).resolves.toBeUndefined();
  });

  it('a call after close() fails with E_ETCD_CLOSED (a client made from flags, and one made directly)', async () => {
    for (const c of [await plain(etcd.clientUrl), new GrpcEtcdClient({ endpoints: [etcd.clientUrl] })]) {
      await c.currentRevision(5_000);
      c.close();
      expect((await rejection(c.currentRevision(1_000))).code).toBe('E_ETCD_CLOSED');
    }
  });

  it('several endpoints: the first reachable one answers', async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const c = new GrpcEtcdClient({ endpoints: [dead, etcd.clientUrl], dialTimeoutMs: 2_000 });
    cleanups.push(async () => c.close());
    expect(await c.currentRevision(5_000)).toBeGreaterThan(0);
  });
});

describe('EtcdClient failures', () => {
  const cleanups = cleanupAfterEach();

  it('nobody listening: E_ETCD_UNAVAILABLE, one of the codes the CLI calls unreachable', async () => {
    const c: EtcdClient = await plain(`http://127.0.0.1:${await freePort()}`);
    cleanups.push(async () => c.close());
    const err = await rejection(c.status({ timeoutMs: 5_000 }));
    expect(err.code).toBe('E_ETCD_UNAVAILABLE');
    expect(ETCD_UNREACHABLE_CODES.has(err.code)).toBe(true);
  });

  it('no answer within the deadline: E_ETCD_TIMEOUT', async () => {
    const peer = await startSilentPeer();
    cleanups.push(() => peer.close());
    const c = new GrpcEtcdClient({ endpoints: [peer.url] });
    cleanups.push(async () => c.close());
    const err = await rejection(c.status({ timeoutMs: 300 }));
    expect(err.code).toBe('E_ETCD_TIMEOUT');
    expect(err.message).toMatch(/Status: deadline exceeded/);
  });

  it('aborting the signal cancels a pending defragmentation at once (shutdown must not hang on it)', async () => {
    const peer = await startSilentPeer();
    cleanups.push(() => peer.close());
    const c = await plain(peer.url);
    cleanups.push(async () => c.close());
    const stop = new AbortController();
    const call = c.defragment({ timeoutMs: 3_600_000, signal: stop.signal });
    let settled = false;
    call.then(
      () => (settled = true),
      () => (settled = true),
    );
    await waitFor(() => peer.received() > 0, 'the call to reach the silent peer', 10_000, 10);
    expect(settled).toBe(false);
    stop.abort();
    const err = await rejection(call);
    expect(err.code).toBe('E_ETCD_CANCELLED');
    expect(err.message).toMatch(/cancel/i);
  });

  it("a gRPC status becomes an EtcdError with its code and etcd's message unchanged", () => {
    const cases: Array<[number, string, string]> = [
      [14, '14 UNAVAILABLE: Connection dropped', 'E_ETCD_UNAVAILABLE'],
      [4, 'deadline exceeded', 'E_ETCD_TIMEOUT'],
      [1, 'call cancelled', 'E_ETCD_CANCELLED'],
      [16, 'etcdserver: invalid auth token', 'E_ETCD_AUTH'],
      [7, 'etcdserver: permission denied', 'E_ETCD_AUTH'],
      [11, 'etcdserver: mvcc: required revision has been compacted', 'E_ETCD_COMPACTED'],
      [5, 'etcdserver: member not found', 'E_ETCD_REQUEST'],
    ];
    for (const [status, message, code] of cases) {
      const err = etcdErrorFromStatus(status, message);
      expect(err.code).toBe(code);
      expect(err.message).toBe(message);
      expect(err.cause).toBeUndefined();
    }
    const same = new EtcdError('E_ETCD_AUTH', 'x');
    expect(isEtcdError(same, 'E_ETCD_AUTH')).toBe(true);
    expect(isEtcdError(same, 'E_ETCD_TIMEOUT')).toBe(false);
    expect(isEtcdError(new Error('x'))).toBe(false);
  });
});
