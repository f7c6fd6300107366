/**
 * Our gRPC transport (src/etcd/grpc.ts) against @grpc/grpc-js carrying the same generated messages
 * (support/grpc-js-transport.ts), and the lean hand-framed client the online replay used before
 * (src/etcd/lean-h2.ts, through which the replay still goes), each carrying the same generated messages, on the online replay's work: sequential single-put
 * transactions into a local etcd 3.5 (--unsafe-no-fsync, as the replay etcd runs), each waiting for the one
 * before, as the replay does.
 *
 *   ETCD_BIN=node_modules/.cache/etcd-3.5.16/usr/bin/etcd npm run bench -- --compiled transport [-- --runs=5 --txns=5000]
 *
 * Per run every client makes --txns transactions, in an order that rotates run by run (load drift hits all
 * alike); each reports transactions per second and the CPU of this process per transaction (user + system;
 * etcd's own CPU is not counted). Medians with the range; the last line is JSON.
 */
import http2 from 'node:http2';
import os from 'node:os';
import { LocalGrpcEtcdClient } from '../../src/etcd/calls.js';
import { atLeast35, type ReplayOp } from '../../src/etcd/index.js';
import { etcdBinaries, startTestEtcd } from '../../test/support/etcd.js';
import { replayKey, replayValue } from '../../test/support/restore-chain.js';
import { GrpcJsTransport } from './support/grpc-js-transport.js';
import { LeanH2 } from '../../src/etcd/lean-h2.js';
import { framedTxnRequest } from '../../src/etcd/replay-codec.js';
import { arg, median, round1, table } from './support/measure.js';

const RUNS = arg('runs', 5);
const TXNS = arg('txns', 5000);
const KEY_SPACE = 5000;
const VALUE_BYTES = 100;

interface Subject {
  name: string;
  /** Opens the client; the returned function commits transaction `i`. */
  open(url: string): Promise<{ commit(i: number): Promise<unknown>; close(): Promise<void> | void }>;
}

const op = (i: number): ReplayOp[] => [{ request_put: { key: replayKey(i, KEY_SPACE), value: replayValue(i, VALUE_BYTES) } }];
/** The replay's per-call settings: a deadline and a stop signal on every transaction. */
const settings = () => ({ timeoutMs: 30_000, signal: new AbortController().signal });

const SUBJECTS: Subject[] = [
  {
    name: 'ours (node:http2)',
    async open(url) {
      const c = new LocalGrpcEtcdClient(url);
      const s = settings();
      return { commit: (i) => c.txn(op(i), s), close: () => c.close() };
    },
  },
  {
    name: '@grpc/grpc-js',
    async open(url) {
      const c = new LocalGrpcEtcdClient(url, new GrpcJsTransport({ endpoints: [url] }));
      const s = settings();
      return { commit: (i) => c.txn(op(i), s), close: () => c.close() };
    },
  },
  {
    // The floor of anything on node:http2: a stream per call, the request pre-framed, nothing decoded.
    name: 'bare node:http2',
    async open(url) {
      const session = http2.connect(url);
      await new Promise((resolve, reject) => session.once('connect', resolve).once('error', reject));
      const headers = { ':method': 'POST', ':path': '/etcdserverpb.KV/Txn', 'content-type': 'application/grpc', te: 'trailers' };
      return {
        commit: (i) =>
          new Promise<void>((resolve, reject) => {
            const stream = session.request(headers);
            stream.on('data', () => undefined);
            stream.on('error', reject);
            stream.on('close', () => resolve());
            stream.end(framedTxnRequest(op(i)));
          }),
        close: () => void session.close(),
      };
    },
  },
  {
    name: 'lean (hand-framed h2)',
    async open(url) {
      const c = await LeanH2.connect(url);
      const s = settings();
      return { commit: (i) => c.call('/etcdserverpb.KV/Txn', framedTxnRequest(op(i)), s), close: () => c.close() };
    },
  },
];

async function main(): Promise<void> {
  const binaries = await etcdBinaries();
  const noFsync = atLeast35(await binaries.version());
  if (!noFsync) console.log('etcd 3.4 (ETCD_BIN names 3.5): it has no --unsafe-no-fsync, so the disk sets the pace');
  const etcd = await startTestEtcd({ binaries, extraArgs: noFsync ? ['--unsafe-no-fsync'] : [] });
  const results = new Map<string, { rate: number[]; cpuUs: number[] }>(SUBJECTS.map((s) => [s.name, { rate: [], cpuUs: [] }]));
  const loads: number[] = [];
  let index = 0;
  try {
    // Warm-up: every client once, so JIT and connection set-up are out of the figures.
    for (const s of SUBJECTS) {
      const c = await s.open(etcd.clientUrl);
      for (let i = 0; i < 500; i++) await c.commit(index++);
      await c.close();
    }
    for (let run = 0; run < RUNS; run++) {
      const order = SUBJECTS.map((_, k) => SUBJECTS[(k + run) % SUBJECTS.length]!);
      loads.push(os.loadavg()[0]!);
      for (const s of order) {
        const c = await s.open(etcd.clientUrl);
        await c.commit(index++);
        const cpu0 = process.cpuUsage();
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < TXNS; i++) await c.commit(index++);
        const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
        const cpu = process.cpuUsage(cpu0);
        await c.close();
        const r = results.get(s.name)!;
        r.rate.push(TXNS / seconds);
        r.cpuUs.push((cpu.user + cpu.system) / TXNS);
        console.log(`run ${run + 1} ${s.name}: ${Math.round(TXNS / seconds)} txn/s, ${round1((cpu.user + cpu.system) / TXNS)} µs CPU/txn`);
      }
    }
  } finally {
    await etcd.cleanup();
  }
  const range = (xs: number[], f: (n: number) => number | string) => `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`;
  const ours = results.get(SUBJECTS[0]!.name)!;
  console.log(
    table(
      ['client', 'txn/s', 'CPU µs/txn', 'ours ÷ this (rate)'],
      SUBJECTS.map((s) => {
        const r = results.get(s.name)!;
        return [s.name, range(r.rate, Math.round), range(r.cpuUs, round1), (median(ours.rate) / median(r.rate)).toFixed(2)];
      }),
    ),
  );
  console.log(`load average (1 min) at each run: ${loads.map(round1).join(', ')}; ${TXNS} txns per client per run, ${RUNS} runs`);
  console.log(JSON.stringify({ runs: RUNS, txns: TXNS, loads, results: Object.fromEntries(results) }));
}

await main();
