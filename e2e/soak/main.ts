/**
 * `npm run soak -- --seed=<n> --minutes=<m> [--topology=single|three] [--store=local|s3] [--pit=<n>] [--keep]`:
 * one seeded fault soak; prints its table and exits 0 when every check passed, 1 otherwise (with the seed,
 * the fault schedule and the checker's first difference).
 */
import { findEtcdBinaries } from '../../src/etcd/binaries.js';
import { resultTable } from './report.js';
import { describeFailure, runSoak } from './run.js';
import type { StoreKind, Topology } from './schedule.js';

const arg = (name: string): string | undefined => {
  const a = process.argv.find((x) => x === `--${name}` || x.startsWith(`--${name}=`));
  return a === undefined ? undefined : a.includes('=') ? a.slice(a.indexOf('=') + 1) : 'true';
};

const seed = Number(arg('seed') ?? Math.floor(Math.random() * 1e6));
const minutes = Number(arg('minutes') ?? '1');
const topology = (arg('topology') ?? 'single') as Topology;
const store = (arg('store') ?? 'local') as StoreKind;
if (!Number.isInteger(seed) || !(minutes > 0) || !['single', 'three'].includes(topology) || !['local', 's3'].includes(store)) {
  process.stderr.write(
    'usage: npm run soak -- --seed=<n> --minutes=<m> [--topology=single|three] [--store=local|s3] [--pit=<n>] [--keep]\n',
  );
  process.exit(2);
}
const bins = await findEtcdBinaries({ etcdBin: process.env.ETCD_BIN, path: process.env.PATH ?? '' });
const result = await runSoak({
  seed,
  durationMs: minutes * 60_000,
  topology,
  store,
  pointInTimeChecks: Number(arg('pit') ?? '3'),
  etcdPath: bins.etcd,
  etcdctlPath: bins.etcdctl ?? 'etcdctl',
  keep: arg('keep') === 'true',
  log: (l) => process.stderr.write(`${l}\n`),
});
process.stdout.write(`${resultTable(result, minutes)}\n`);
if (result.failures.length > 0) {
  process.stdout.write(`${describeFailure(result)}\n`);
  process.exit(1);
}
