/**
 * Restore benches: a real base snapshot plus a synthetic delta chain written straight into a store (no
 * source etcd has to make the writes), and the FLOOR: a plain loop of single-put transactions against a
 * local etcd of the same kind the restorer replays into.
 */
import { Readable } from 'node:stream';
import type { Etcd3 } from 'etcd3';
import { createCompressStream, newSnapshot, silentLogger, suffixForPolicy } from '../../snapstore/src/index.js';
import type { CompressionPolicy, SnapStore, Snapshot } from '../../snapstore/src/index.js';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { LeanH2 } from '../../src/etcd/lean-h2.js';
import { framedTxnRequest } from '../../src/etcd/replay-codec.js';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';
import { saveDeltaSnapshot } from '../../src/snapshotter/delta-snapshot.js';
import { takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { ours } from './etcd-client.js';
import { createHash } from 'node:crypto';
import { pipeline as pipelineCb } from 'node:stream';

const TIME = '2026-11-21T10:00:00.123456789Z';

export function replayKey(i: number, keySpace: number): Buffer {
  return Buffer.from(`/registry/bench/replay/key-${String(i % keySpace).padStart(6, '0')}`);
}

/** A small value that differs per revision. */
export function replayValue(i: number, bytes: number): Buffer {
  const v = Buffer.alloc(bytes, 0x61 + (i % 26));
  v.write(String(i), 0, 'latin1');
  return v;
}

/** Takes a real full snapshot of `client`'s etcd into `store` (uncompressed) and returns the listed record. */
export async function baseSnapshot(client: Etcd3, store: SnapStore): Promise<Snapshot> {
  const snap = await takeFullSnapshot(
    { client: ours(client), store, compression: undefined, now: () => new Date(), logger: silentLogger },
    { isFinal: false, snapshotTimeoutMs: 30 * 60_000, connectionTimeoutMs: 10_000 },
  );
  const listed = (await store.list()).find((s) => s.snapName === snap.snapName);
  if (!listed) throw new Error(`${snap.snapName} not listed`);
  return listed;
}

/**
 * Writes `revisions` single-event revisions after `base` as deltas of `perDelta` events each, the payloads
 * the snapshotter would have written; `eventAt(i, revision)` gives the i-th event. Returns the deltas written.
 */
async function writeChain(
  store: SnapStore,
  base: Snapshot,
  opts: { revisions: number; perDelta: number; compression: CompressionPolicy | undefined },
  eventAt: (i: number, revision: number) => DeltaEvent,
): Promise<number> {
  let start = base.lastRevision + 1;
  let second = Math.floor(base.createdOn.getTime() / 1000) + 1;
  let buf = new DeltaBuffer();
  let deltas = 0;
  for (let i = 0; i < opts.revisions; i++) {
    buf.append(eventAt(i, base.lastRevision + 1 + i));
    if ((i + 1) % opts.perDelta === 0 || i === opts.revisions - 1) {
      const payload = buf.take()!;
      await saveDeltaSnapshot(store, payload, start, opts.compression, new Date(second++ * 1000));
      start = payload.lastRevision + 1;
      buf = new DeltaBuffer();
      deltas++;
    }
  }
  return deltas;
}

/**
 * Writes `revisions` single-put revisions after `base` as deltas of `perDelta` events each, cycling through
 * `keySpace` keys: the payloads the snapshotter would have written for that many sequential puts.
 */
export async function writeSmallPutChain(
  store: SnapStore,
  base: Snapshot,
  opts: { revisions: number; perDelta: number; keySpace: number; valueBytes: number; compression: CompressionPolicy | undefined },
): Promise<number> {
  return writeChain(store, base, opts, (i) => smallPut(base, i, opts.keySpace, opts.valueBytes));
}

/**
 * The i-th put of a chain that cycles through `keySpace` keys after `base` (which holds none of them), with
 * the create revision and version etcd writes: key k is created at the base's revision + 1 + k, and each
 * round through the keys adds a version. (Every put as a create, version 1, is a history etcd never
 * writes; the offline replay refuses it and `auto` went online for it.)
 */
function smallPut(base: Snapshot, i: number, keySpace: number, valueBytes: number): DeltaEvent {
  return {
    type: 'PUT',
    key: replayKey(i, keySpace),
    value: replayValue(i, valueBytes),
    createRevision: base.lastRevision + 1 + (i % keySpace),
    modRevision: base.lastRevision + 1 + i,
    version: Math.floor(i / keySpace) + 1,
    lease: '0',
    time: TIME,
  };
}

/**
 * A realistic chain for replay benches: `revisions` single-op revisions after `base`, each event carrying
 * the create revision and version etcd would have written (the offline replay checks them). Every
 * `newKeyEvery`-th revision creates a key; the others overwrite one of the keys created so far, and every
 * `deleteEvery`-th deletes one (it is created again by a later put, version 1). Returns the deltas written.
 */
export async function writeChurnChain(
  store: SnapStore,
  base: Snapshot,
  opts: {
    revisions: number;
    perDelta: number;
    newKeyEvery: number;
    deleteEvery: number;
    valueBytes: number;
    compression: CompressionPolicy | undefined;
  },
): Promise<number> {
  const state: Array<{ create: number; version: number; live: boolean }> = [];
  return writeChain(store, base, opts, (i, rev) => {
    let k: number;
    if (i % opts.newKeyEvery === 0 || state.length === 0) {
      k = state.length;
      state.push({ create: 0, version: 0, live: false });
    } else {
      // A deterministic spread over the keys so far (Knuth's multiplicative hash).
      k = Math.imul(i, 2654435761) >>> 0;
      k %= state.length;
    }
    const s = state[k]!;
    const key = Buffer.from(`/registry/bench/churn/${String(k).padStart(7, '0')}`);
    if (s.live && opts.deleteEvery > 0 && i % opts.deleteEvery === 0) {
      s.live = false;
      return { type: 'DELETE', key, value: Buffer.alloc(0), createRevision: 0, modRevision: rev, version: 0, lease: '0', time: TIME };
    }
    if (!s.live) {
      s.create = rev;
      s.version = 0;
      s.live = true;
    }
    s.version++;
    return {
      type: 'PUT',
      key,
      value: replayValue(i, opts.valueBytes),
      createRevision: s.create,
      modRevision: rev,
      version: s.version,
      lease: '0',
      time: TIME,
    };
  });
}

/**
 * One delta of about `bytes` bytes of JSON, streamed into the store (never whole in memory):
 * `values` of `valueBytes` each, single-put revisions after `base`. Returns the number of revisions.
 */
export async function writeLargeDelta(
  store: SnapStore,
  base: Snapshot,
  opts: { bytes: number; valueBytes: number; keySpace: number; compression: CompressionPolicy | undefined },
): Promise<{ revisions: number; jsonBytes: number; snap: Snapshot }> {
  // Each element is about the same size, so the count follows from one encoded sample.
  const sample = (i: number): DeltaEvent => smallPut(base, i, opts.keySpace, opts.valueBytes);
  const per = Buffer.byteLength(encodeDeltaEvent(sample(0))) + 1;
  const revisions = Math.max(1, Math.round(opts.bytes / per));
  const hash = createHash('sha256');
  let jsonBytes = 0;
  async function* body(): AsyncGenerator<Buffer> {
    const parts: Buffer[] = [];
    let pending = 0;
    const emit = function* (b: Buffer) {
      hash.update(b);
      jsonBytes += b.length;
      parts.push(b);
      pending += b.length;
      if (pending >= 1 << 20) {
        yield Buffer.concat(parts);
        parts.length = 0;
        pending = 0;
      }
    };
    for (let i = 0; i < revisions; i++) yield* emit(Buffer.from(`${i === 0 ? '[' : ','}${encodeDeltaEvent(sample(i))}`));
    yield* emit(Buffer.from(']'));
    if (parts.length) yield Buffer.concat(parts);
    yield hash.digest();
  }
  const snap = newSnapshot({
    kind: 'Incr',
    startRevision: base.lastRevision + 1,
    lastRevision: base.lastRevision + revisions,
    createdOn: new Date(base.createdOn.getTime() + 1000),
    compressionSuffix: suffixForPolicy(opts.compression),
  });
  await store.save(
    snap,
    pipelineCb(Readable.from(body()), createCompressStream(opts.compression), () => {}),
  );
  return { revisions, jsonBytes, snap };
}

/**
 * FLOOR: `revisions` sequential single-put transactions through the same lean gRPC client and request
 * encoding as the online replay (src/restorer/replay-txns.ts), requests built before the clock starts.
 * Returns revisions per second.
 */
export async function floorLoop(
  clientUrl: string,
  firstIndex: number,
  opts: { revisions: number; keySpace: number; valueBytes: number },
): Promise<number> {
  const reqs = new Array<Buffer>(opts.revisions);
  for (let i = 0; i < opts.revisions; i++) {
    const n = firstIndex + i;
    reqs[i] = framedTxnRequest([{ request_put: { key: replayKey(n, opts.keySpace), value: replayValue(n, opts.valueBytes) } }]);
  }
  const client = await LeanH2.connect(clientUrl);
  try {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < opts.revisions; i++) await client.call('/etcdserverpb.KV/Txn', reqs[i]!);
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    return opts.revisions / seconds;
  } finally {
    await client.close();
  }
}
