/**
 * The soak's workload, a process of its own: one etcd operation at a time (puts of new keys, overwrites,
 * deletes, range deletes, multi-key transactions, keys with leases and their revocation), each line of the
 * ack log written once etcd has answered (or failed to). Runs until SIGTERM.
 *
 * Usage: node --import tsx e2e/soak/workload.ts --endpoints=URL[,URL…] --seed=N --out=FILE [--pause-ms=N] [--leases=false]
 */
import { appendFileSync } from 'node:fs';
import { noop } from 'cockatiel';
import { Etcd3 } from 'etcd3';
import type { AckRecord, Effect, OpKind } from './ack-log.js';
import { createPrng } from './prng.js';

const arg = (name: string): string | undefined => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const endpoints = (arg('endpoints') ?? '').split(',').filter(Boolean);
const seed = Number(arg('seed') ?? '1');
const out = arg('out');
const pauseMs = Number(arg('pause-ms') ?? '30');
// Leased keys (odd seeds): the checker's restores must give their leases back too (hashkv compares the lease IDs).
const withLeases = arg('leases') !== 'false';
if (endpoints.length === 0 || !out) {
  process.stderr.write('usage: workload.ts --endpoints=URL[,URL…] --seed=N --out=FILE [--pause-ms=N]\n');
  process.exit(2);
}

const rng = createPrng(seed ^ 0x5eed);
// No retries and no circuit breaker in the client: every operation is tried once and its outcome recorded
// as it was (a breaker left open for seconds after a leader change would only stall the workload).
const client = new Etcd3({ hosts: endpoints, dialTimeout: 2_000, faultHandling: { host: () => noop, global: noop } });
const callOpts = () => ({ deadline: Date.now() + 5_000 });
const buf = (s: string) => Buffer.from(s);
const GROUPS = 8;

/** Keys the workload believes may exist (acknowledged or possibly applied), with their lease if any. */
const live = new Map<string, string | undefined>();
const leases = new Map<string, Set<string>>();
/**
 * Per lease, keys an unanswered write (put or delete) may have detached from it, or not: a revoke of the
 * lease may delete them or not, which its record says (`maybe`).
 */
const maybeAttached = new Map<string, Set<string>>();

/** After an operation: what its key effects say of the keys' lease attachment, given the outcome. */
function settleAttachment(before: ReadonlyMap<string, string | undefined>, answered: boolean): void {
  for (const [k, lease] of before) {
    // Answered: the write detached the key for sure (or deleted it). Unanswered: it may still be attached.
    if (answered) for (const keys of maybeAttached.values()) keys.delete(k);
    else if (lease !== undefined) maybeAttached.set(lease, new Set([...(maybeAttached.get(lease) ?? []), k]));
  }
}
let counter = 0;
let seq = 0;
let stopping = false;
process.on('SIGTERM', () => (stopping = true));

function liveKey(): string | undefined {
  if (live.size === 0) return undefined;
  const i = rng.int(0, live.size - 1);
  let n = 0;
  for (const k of live.keys()) if (n++ === i) return k;
  return undefined;
}

const value = () => `v${seq}-${rng.int(0, 1e9).toString(36)}-${'x'.repeat(rng.int(0, 200))}`;

interface Planned {
  op: OpKind;
  effects: Effect[];
  run(): Promise<number>;
  /** Updates the model once the operation may have been applied. */
  apply(): void;
}

function plan(): Planned {
  const op = rng.weighted<OpKind>([
    ['put-new', live.size > 3000 ? 1 : 6],
    ['overwrite', 5],
    ['delete', live.size > 3000 ? 6 : 2],
    ['range-delete', 1],
    ['txn', 2],
    ['lease-put', withLeases ? 1 : 0],
    ['lease-revoke', withLeases && leases.size > 0 ? 1 : 0],
  ]);
  if (op === 'put-new' || op === 'overwrite' || (op === 'delete' && live.size === 0)) {
    const grouped = rng.next() < 0.3;
    const k =
      op === 'overwrite' && live.size > 0
        ? liveKey()!
        : grouped
          ? `/soak/g/${rng.int(0, GROUPS - 1)}/${counter++}`
          : `/soak/k/${counter++}`;
    const v = value();
    return {
      op: op === 'delete' ? 'put-new' : op,
      effects: [{ k, v }],
      run: async () => Number((await client.kv.put({ key: buf(k), value: buf(v) }, callOpts())).header.revision),
      apply: () => live.set(k, undefined),
    };
  }
  if (op === 'delete') {
    const k = liveKey()!;
    return {
      op,
      effects: [{ k, v: null }],
      run: async () => Number((await client.kv.deleteRange({ key: buf(k) }, callOpts())).header.revision),
      apply: () => live.delete(k),
    };
  }
  if (op === 'range-delete') {
    const p = `/soak/g/${rng.int(0, GROUPS - 1)}/`;
    const end = Buffer.from(p);
    end[end.length - 1]! += 1;
    return {
      op,
      effects: [{ p }],
      run: async () => Number((await client.kv.deleteRange({ key: buf(p), range_end: end }, callOpts())).header.revision),
      apply: () => {
        for (const k of [...live.keys()]) if (k.startsWith(p)) live.delete(k);
      },
    };
  }
  if (op === 'txn') {
    const effects: Effect[] = [];
    const n = rng.int(2, 4);
    const used = new Set<string>();
    for (let i = 0; i < n; i++) {
      const k = rng.next() < 0.5 && live.size > 0 ? liveKey()! : `/soak/t/${counter++}`;
      if (used.has(k)) continue;
      used.add(k);
      effects.push({ k, v: value() });
    }
    const del = liveKey();
    if (del !== undefined && !used.has(del) && rng.next() < 0.5) effects.push({ k: del, v: null });
    const success = effects.map((e) =>
      'k' in e && e.v !== null
        ? { request_put: { key: buf(e.k), value: buf(e.v) } }
        : { request_delete_range: { key: buf((e as { k: string }).k) } },
    );
    return {
      op,
      effects,
      run: async () => Number((await client.kv.txn({ compare: [], success }, callOpts())).header.revision),
      apply: () => {
        for (const e of effects) {
          if (!('k' in e)) continue;
          if (e.v === null) live.delete(e.k);
          else live.set(e.k, undefined);
        }
      },
    };
  }
  if (op === 'lease-put') {
    const k = `/soak/l/${counter++}`;
    const v = value();
    let leaseId = '';
    return {
      op,
      effects: [{ k, v }],
      run: async () => {
        // A long TTL: no lease expires during a run, so every deletion of a lease key is one the log records.
        leaseId = String((await client.leaseClient.leaseGrant({ TTL: 3600 }, callOpts())).ID);
        return Number((await client.kv.put({ key: buf(k), value: buf(v), lease: leaseId }, callOpts())).header.revision);
      },
      apply: () => {
        if (leaseId === '') return;
        live.set(k, leaseId);
        leases.set(leaseId, new Set([...(leases.get(leaseId) ?? []), k]));
      },
    };
  }
  const [id, keys] = [...leases.entries()][rng.int(0, leases.size - 1)]!;
  const attached = [...keys].filter((k) => live.get(k) === id);
  const uncertain = [...(maybeAttached.get(id) ?? [])].filter((k) => !attached.includes(k));
  return {
    op,
    effects: [...attached.map((k) => ({ k, v: null })), ...uncertain.map((k) => ({ k, v: null, maybe: true as const }))],
    run: async () => Number((await client.leaseClient.leaseRevoke({ ID: id }, callOpts())).header.revision),
    apply: () => {
      leases.delete(id);
      maybeAttached.delete(id);
      for (const k of attached) live.delete(k);
    },
  };
}

function record(r: AckRecord): void {
  // Synchronous: the line is in the file before the next operation starts.
  appendFileSync(out!, `${JSON.stringify(r)}\n`);
}

while (!stopping) {
  const p = plan();
  seq++;
  // Each written key's lease before the operation (a lease revoke's keys are settled by its own apply).
  const before = new Map(p.op === 'lease-revoke' ? [] : p.effects.flatMap((e) => ('k' in e ? [[e.k, live.get(e.k)] as const] : [])));
  try {
    const rev = await p.run();
    p.apply();
    settleAttachment(before, true);
    record({ seq, op: p.op, effects: p.effects, outcome: 'ok', rev });
  } catch (err) {
    p.apply();
    settleAttachment(before, false);
    record({ seq, op: p.op, effects: p.effects, outcome: 'unknown' });
    process.stderr.write(`${new Date().toISOString()} seq ${seq} ${p.op}: ${String(err).slice(0, 300)}\n`);
    // etcd is down or has no leader: do not spin.
    await new Promise((r) => setTimeout(r, 200));
  }
  await new Promise((r) => setTimeout(r, pauseMs));
}
client.close();
