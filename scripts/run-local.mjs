#!/usr/bin/env node
// `npm start`: a local etcd on free loopback ports plus `etcdbrctl server` against it with a Local
// snapstore. State lives in ETCDBR_LOCAL_DIR (default: .local/ in the project) so a restart resumes; the
// ports live there too (ports.json), so a restart finds etcd where the member's data says it is.
import { spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findEtcdBinaries } from '../dist/etcd/binaries.js';
import { startLocalEtcd } from '../dist/etcd/local-etcd.js';
import { keptPorts, saveKeptPorts } from '../dist/etcd/ports.js';

const root = fileURLToPath(new URL('..', import.meta.url));

// What runs (etcd, then the server) and stops it, first thing: a stop that comes while etcd starts must find
// the handlers in place, or the default action would end this script and leave etcd running.
let etcd;
let server;
let stopping = false;
async function shutdown(code) {
  if (stopping) return;
  stopping = true;
  if (server && server.exitCode === null && server.signalCode === null) {
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
  }
  await etcd?.stop();
  // An etcd still starting is killed on exit (startLocalEtcd's killOnProcessExit).
  process.exit(code);
}
process.on('SIGINT', () => void shutdown(130));
process.on('SIGTERM', () => void shutdown(143));

// `npm start` runs `exec node scripts/run-local.mjs` (package.json), so npm is this script's parent. npm passes
// a Ctrl-C or a SIGTERM on, but nothing passes on a SIGKILL of npm: the kernel's parent-death signal (through
// the process-control addon, which `npm ci` builds) tells this script, which then stops as on SIGTERM. When npm
// ended before that was in place, the parent is already another process: stop at once.
const parentAtStart = process.ppid;
try {
  createRequire(import.meta.url)('@etcdbrctl/malloc-trim/process-control.cjs').setParentDeathSignal(constants.signals.SIGTERM);
  if (process.ppid !== parentAtStart) await shutdown(143);
} catch (err) {
  console.error(`(a SIGKILL of npm will leave etcd and the server running: ${err.message})`);
}
/** `path` as the user's shell reaches it: relative when under the current directory, else absolute. */
const relativeToCwd = (path) => {
  const rel = relative(process.env.INIT_CWD ?? process.cwd(), path);
  return rel.startsWith('..') || isAbsolute(rel) ? path : rel;
};
const base = resolve(process.env.ETCDBR_LOCAL_DIR ?? join(root, '.local'));
const etcdDataDir = join(base, 'etcd-data');
const storeDir = join(base, 'backups');
const tempDir = join(base, 'tmp');
await mkdir(storeDir, { recursive: true, mode: 0o700 });
await mkdir(tempDir, { recursive: true, mode: 0o700 });

const binaries = await findEtcdBinaries({ etcdBin: process.env.ETCD_BIN, path: process.env.PATH ?? '' });
// etcd's member keeps the peer URL it was created with: on a new peer port the sidecar would update the
// member and warn "restart etcd manually". So the ports of the last run are used again while they are free.
const portsFile = join(base, 'ports.json');
const kept = await keptPorts(portsFile, ['client', 'peer', 'server']);
if (kept.moved.length > 0) {
  console.log(`ports of the last run in use by another process (${kept.moved.join(', ')}): new ones picked`);
}
try {
  etcd = await startLocalEtcd({
    binaries,
    dataDir: etcdDataDir,
    name: 'default',
    clientPort: kept.ports.client,
    peerPort: kept.ports.peer,
  });
} catch (err) {
  // Taken between the check and etcd's bind: new ports (startLocalEtcd retries those itself).
  if (err?.code !== 'E_PORT_IN_USE') throw err;
  console.log('a port of the last run was taken meanwhile: new ones picked');
  etcd = await startLocalEtcd({ binaries, dataDir: etcdDataDir, name: 'default' });
}
const serverPort = Number(process.env.ETCDBR_SERVER_PORT ?? kept.ports.server);
await saveKeptPorts(portsFile, {
  client: Number(new URL(etcd.clientUrl).port),
  peer: Number(new URL(etcd.peerUrl).port),
  server: serverPort,
});

// The etcd config the sidecar serves on /config (upstream reads it from ETCD_CONF).
const etcdConf = join(base, 'etcd.conf.yaml');
await writeFile(
  etcdConf,
  [
    'name: default',
    `data-dir: ${etcdDataDir}`,
    `listen-client-urls: ${etcd.clientUrl}`,
    `listen-peer-urls: ${etcd.peerUrl}`,
    'advertise-client-urls:',
    `  default: [${etcd.clientUrl}]`,
    'initial-advertise-peer-urls:',
    `  default: [${etcd.peerUrl}]`,
    `initial-cluster: default=${etcd.peerUrl}`,
    'initial-cluster-token: etcd-cluster',
    'initial-cluster-state: new',
    '',
  ].join('\n'),
  { mode: 0o600 },
);

const args = [
  join(root, 'bin', 'etcdbrctl'),
  'server',
  `--endpoints=${etcd.clientUrl}`,
  `--server-port=${serverPort}`,
  '--storage-provider=Local',
  `--store-container=${storeDir}`,
  `--snapstore-temp-directory=${tempDir}`,
  `--data-dir=${etcdDataDir}`,
  `--restoration-temp-snapshots-dir=${join(base, 'restoration.tmp')}`,
  '--schedule=*/5 * * * *',
  '--delta-snapshot-period=20s',
  '--garbage-collection-period=5m',
  // A person reads this in a terminal: text lines there, JSON (the sidecar's default) when piped.
  ...(process.stderr.isTTY && !process.argv.slice(2).some((a) => a.startsWith('--log-format')) ? ['--log-format=text'] : []),
  ...process.argv.slice(2),
];

console.log(`etcd ${await binaries.version()}     ${etcd.clientUrl}  (data: ${etcdDataDir})`);
console.log(`etcdbrctl server   http://127.0.0.1:${serverPort}  (try /healthz, /snapshot/latest, /metrics)`);
console.log(`Local snapstore    ${join(storeDir, 'v2')}`);
// bin/etcdbrctl runs on the Node `npm ci` put into node_modules when the machine's own is older, so this
// works wherever setup ran; `npm exec` would add npm's engine warnings on such a machine.
console.log(
  `list backups with: node ${relativeToCwd(join(root, 'bin', 'etcdbrctl'))} ls --storage-provider=Local --store-container=${storeDir}`,
);
console.log('Ctrl-C stops both.\n');

// A stop requested meanwhile is under way (shutdown() exits): nothing more to start.
if (!stopping) {
  server = spawn(process.execPath, args, {
    stdio: 'inherit',
    env: { ...process.env, ETCD_CONF: etcdConf, POD_NAME: process.env.POD_NAME ?? 'default' },
  });

  server.on('exit', (code, signal) => {
    if (!stopping) {
      console.error(`etcdbrctl server exited (${signal ?? `code ${code}`}); stopping etcd.`);
      void shutdown(code ?? 1);
    }
  });
  void etcd.exited.then((code) => {
    if (!stopping) {
      console.error(`etcd exited unexpectedly (code ${code}):\n${etcd.logTail().split('\n').slice(-15).join('\n')}`);
      void shutdown(1);
    }
  });
}
