#!/usr/bin/env node
// Writes one test/fixtures/upstream-v0.43 case: the Go etcdbrctl's server (ETCDBRCTL_PEER or --peer) backs up
// a single-member etcd 3.5.16 (the one setup.mjs unpacks) into a Local store while an unseeded, concurrent
// workload runs, and the source etcd's exact state at the end becomes expected.json (keys and values base64,
// create/mod revision, version, lease as a decimal string, sorted by key bytes: test/support/etcd-dump.ts's
// format). Prints the facts the fixture README's row needs, the source's `etcdctl endpoint hashkv` among
// them, and checks that the Go tool's own restore of the store (started on etcd 3.5) gives expected.json,
// leases aside. Plain JavaScript: it needs only the npm dependencies and the peer binary.
//
//   node scripts/upstream-fixture.mjs --peer=/path/to/etcdbrctl-v0.43.0 --compression=none|gzip|lzw|zlib --out=DIR [--writes=2250] [--log=FILE]
//     [--delta-period=2s] [--delta-memory-limit=1048576]
//
// DIR (must not exist) gets snapstore/ and expected.json; FILE, if given, the Go server's log. The fixtures use
// the default delta settings (a delta every 2 s or 1 MiB of events: many small deltas); the restore bench also
// writes chains with etcd-druid's (--delta-period=20s --delta-memory-limit=104857600: few large ones).
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';

const root = fileURLToPath(new URL('..', import.meta.url));
const ETCD35 = join(root, 'node_modules', '.cache', 'etcd-3.5.16', 'usr', 'bin');

function fail(msg) {
  console.error(`[upstream-fixture] ERROR: ${msg}`);
  process.exit(1);
}
const say = (msg) => console.error(`[upstream-fixture] ${msg}`);

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const m = /^--([a-z-]+)=(.*)$/.exec(a);
    if (!m) fail(`unknown argument ${a}`);
    return [m[1], m[2]];
  }),
);
const peer = args.peer ?? process.env.ETCDBRCTL_PEER;
const compression = args.compression;
if (!peer || !compression || !args.out) fail('usage: --peer=BIN --compression=none|gzip|lzw|zlib --out=DIR');
if (!['none', 'gzip', 'lzw', 'zlib'].includes(compression)) fail(`--compression=${compression}: none, gzip, lzw or zlib`);
const out = resolve(args.out);
if (existsSync(out)) fail(`${out} exists`);
if (!existsSync(join(ETCD35, 'etcd'))) fail(`no etcd 3.5 at ${ETCD35}: run node scripts/setup.mjs --tests`);

const freePort = () =>
  new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every 100 ms until it is true; fails naming `what()` (read then: it may quote a log) after `ms`. */
async function waitFor(check, what, ms = 60_000) {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) fail(`timed out waiting for ${what()}`);
    await sleep(100);
  }
}

const children = [];
/** A child process whose output is kept; every one is killed when the script ends. */
function start(bin, argv, env = {}) {
  const child = spawn(bin, argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.setEncoding('utf8').on('data', (d) => (log += d));
  child.stderr.setEncoding('utf8').on('data', (d) => (log += d));
  const exited = new Promise((r) => child.once('close', (code) => r(code)));
  children.push(child);
  return { child, exited, log: () => log };
}
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

async function startEtcd(dataDir) {
  const [client, peerPort] = [await freePort(), await freePort()];
  const url = `http://127.0.0.1:${client}`;
  const etcd = start(join(ETCD35, 'etcd'), [
    '--name=default',
    `--data-dir=${dataDir}`,
    `--listen-client-urls=${url}`,
    `--advertise-client-urls=${url}`,
    `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
    `--initial-cluster=default=http://127.0.0.1:${peerPort}`,
  ]);
  const probe = new Etcd3({ hosts: url });
  await waitFor(
    () =>
      probe.get('probe').then(
        () => true,
        () => false,
      ),
    () => `etcd on ${dataDir}\n${etcd.log().slice(-3000)}`,
  );
  probe.close();
  return { url, etcd, peerUrl: `http://127.0.0.1:${peerPort}` };
}

/**
 * expected.json, a key per line, written line by line: a chain of a million writes holds more than the longest
 * string V8 makes (~512 MiB).
 */
function writeExpected(file, d) {
  const fd = openSync(file, 'w');
  try {
    writeSync(fd, `{"revision": ${d.revision}, "kvs": [\n`);
    d.kvs.forEach((kv, i) => writeSync(fd, `${i === 0 ? '' : ',\n'}${JSON.stringify(kv)}`));
    writeSync(fd, '\n]}\n');
  } finally {
    closeSync(fd);
  }
}

/** Where two dumps differ, leases aside (key by key, for the same reason); undefined when they do not. */
function firstDifference(got, want) {
  if (got.revision !== want.revision) return `revision ${got.revision}, expected ${want.revision}`;
  if (got.kvs.length !== want.kvs.length) return `${got.kvs.length} keys, expected ${want.kvs.length}`;
  const strip = (kv) => JSON.stringify({ ...kv, lease: undefined });
  for (let i = 0; i < want.kvs.length; i++) {
    if (strip(got.kvs[i]) !== strip(want.kvs[i])) return `key ${i}: ${strip(got.kvs[i])}, expected ${strip(want.kvs[i])}`;
  }
  return undefined;
}

/** Every key with its revisions, as test/support/etcd-dump.ts dumps it. */
async function dump(url) {
  const client = new Etcd3({ hosts: url, grpcOptions: { 'grpc.max_receive_message_length': -1 } });
  try {
    const res = await client.getAll().exec();
    const kvs = res.kvs.map((kv) => ({
      key: kv.key.toString('base64'),
      value: kv.value.toString('base64'),
      create_revision: Number(kv.create_revision),
      mod_revision: Number(kv.mod_revision),
      version: Number(kv.version),
      lease: String(kv.lease),
    }));
    kvs.sort((a, b) => Buffer.compare(Buffer.from(a.key, 'base64'), Buffer.from(b.key, 'base64')));
    return { revision: Number(res.header.revision), kvs };
  } finally {
    client.close();
  }
}

/** The newest revision the Go server logged as saved (its Local store writes straight to the final name). */
function savedUpTo(log) {
  let last = 0;
  for (const m of log.matchAll(/Successfully saved (?:full|delta) snapshot at: ([^"\s]+)/g)) {
    const n = /(?:Full|Incr)-\d+-(\d+)-/.exec(m[1]);
    if (n) last = Math.max(last, Number(n[1]));
  }
  return last;
}

const work = mkdtempSync(join(tmpdir(), 'upstream-fixture-'));
try {
  const source = await startEtcd(join(work, 'source.etcd'));
  const client = new Etcd3({ hosts: source.url });
  // 50 plain keys before the server starts: the start-up full holds them.
  for (let i = 0; i < 50; i++) await client.put(`base/k${i}`).value(`v${i}`);

  const container = join(out, 'snapstore');
  mkdirSync(container, { recursive: true });
  const serverPort = await freePort();
  // The server reads the member's etcd config at start-up (ETCD_CONF), as etcd-druid mounts it.
  const etcdConf = join(work, 'etcd.conf.yaml');
  writeFileSync(
    etcdConf,
    [
      'name: default',
      `data-dir: ${join(work, 'source.etcd')}`,
      `listen-client-urls: ${source.url}`,
      `advertise-client-urls: ${source.url}`,
      `listen-peer-urls: ${source.peerUrl}`,
      `initial-advertise-peer-urls: ${source.peerUrl}`,
      `initial-cluster: default=${source.peerUrl}`,
      'initial-cluster-state: new',
      'initial-cluster-token: etcd-cluster',
      '',
    ].join('\n'),
  );
  const compress =
    compression === 'none' ? ['--compress-snapshots=false'] : ['--compress-snapshots=true', `--compression-policy=${compression}`];
  const server = start(
    peer,
    [
      'server',
      `--endpoints=${source.url}`,
      '--storage-provider=Local',
      `--store-container=${container}`,
      `--snapstore-temp-directory=${join(work, 'temp')}`,
      `--data-dir=${join(work, 'unused.etcd')}`,
      `--server-port=${serverPort}`,
      '--schedule=0 0 1 1 *',
      `--delta-snapshot-period=${args['delta-period'] ?? '2s'}`,
      `--delta-snapshot-memory-limit=${args['delta-memory-limit'] ?? 1048576}`,
      '--garbage-collection-period=10h',
      ...compress,
    ],
    // v0.41 and later join a Local container to $HOME even when it is absolute.
    { HOME: '/', ETCD_CONF: etcdConf, POD_NAME: 'default', POD_NAMESPACE: 'default' },
  );
  const serving = () => {
    if (server.child.exitCode !== null) fail(`the Go server exited (${server.child.exitCode}):\n${server.log().slice(-3000)}`);
    return savedUpTo(server.log());
  };
  await waitFor(
    () => serving() >= 51,
    () => `the start-up full snapshot\n${server.log().slice(-3000)}`,
  );

  // Eight concurrent writers, 2,250 writes in all (the v0.43 gzip cases' 3 s on a quiet machine; a count, so
  // a loaded machine makes the same size of chain): random values of 50–1,000 bytes, deletes, two-put
  // transactions, puts on four leases that outlive the run (so leased keys are live at the end): kept alive
  // until the client closes, since a run of a million writes outlasts their TTLs, and an expiry's deletes
  // would move etcd on after the workload.
  const leases = [];
  for (const ttl of [600, 600, 3600, 3600]) {
    const l = client.lease(ttl);
    await l.grant();
    leases.push(l);
  }
  let writes = Number(args.writes ?? 2250);
  await Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      for (let n = 0; writes-- > 0; n++) {
        const key = `load/w${w}/k${n}`;
        const val = randomBytes(50 + Math.floor(Math.random() * 950)).toString('base64');
        switch (n % 6) {
          case 0:
          case 1:
            await client.put(key).value(val);
            break;
          case 2:
            await client.delete().key(`load/w${w}/k${n - 2}`);
            break;
          case 3:
            await client
              .if(key, 'Version', '==', 0)
              .then(client.put(`${key}a`).value(val), client.put(`${key}b`).value(val.slice(7)))
              .commit();
            break;
          default:
            await leases[n % 4].put(key).value(val);
        }
      }
    }),
  );
  const head = (await dump(source.url)).revision;
  await waitFor(
    () => serving() >= head,
    () => `a delta at revision ${head}\n${server.log().slice(-3000)}`,
  );
  server.child.kill('SIGTERM');
  await server.exited;
  if (args.log) writeFileSync(args.log, server.log());

  const expected = await dump(source.url);
  if (expected.revision !== head) fail(`etcd moved on after the workload: ${head} → ${expected.revision}`);
  // Stops their keep-alives (without a revoke, which would move etcd on): the process can exit.
  for (const l of leases) l.release();
  writeExpected(join(out, 'expected.json'), expected);
  const hashkv = spawnSync(join(ETCD35, 'etcdctl'), [`--endpoints=${source.url}`, 'endpoint', 'hashkv', '-w', 'json'], {
    encoding: 'utf8',
  });
  if (hashkv.status !== 0) fail(`etcdctl endpoint hashkv: ${hashkv.stderr}`);
  const hash = JSON.parse(hashkv.stdout)[0].HashKV.hash;
  client.close();
  source.etcd.child.kill('SIGTERM');
  await source.etcd.exited;

  // The Go tool's own restore, on etcd 3.5: the fixture is what it restores, leases aside.
  const restored = join(work, 'restored.etcd');
  const r = spawnSync(
    peer,
    [
      'restore',
      '--storage-provider=Local',
      `--store-container=${container}`,
      `--data-dir=${restored}`,
      `--restoration-temp-snapshots-dir=${join(work, 'restore-tmp')}`,
      `--snapstore-temp-directory=${join(work, 'temp')}`,
    ],
    { env: { ...process.env, HOME: '/' }, encoding: 'utf8', maxBuffer: 1 << 26 },
  );
  if (r.status !== 0) fail(`the Go restore failed:\n${r.stderr.slice(-3000)}`);
  const back = await startEtcd(restored);
  const got = await dump(back.url);
  back.etcd.child.kill('SIGTERM');
  await back.etcd.exited;
  const difference = firstDifference(got, expected);
  if (difference !== undefined) fail(`the Go restore of the store differs from expected.json (leases aside): ${difference}`);

  const files = readdirSync(join(container, 'v2')).sort();
  const count = (k) => files.filter((f) => f.startsWith(k)).length;
  say(`files: ${files.length} (${count('Full')} Full, ${count('Incr')} Incr): ${files.join(' ')}`);
  say(
    `final revision ${expected.revision}, keys ${expected.kvs.length}, leased keys ${expected.kvs.filter((kv) => kv.lease !== '0').length}`,
  );
  say(`source hashkv ${hash}; the Go restore equals expected.json (leases aside)`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
