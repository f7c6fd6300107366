/**
 * The system under test: one or three etcd members on free loopback ports, each with its `etcdbrctl server`
 * (the compiled bin, as production runs it) backing up to one shared store. Members and sidecars are
 * restartable; who leads is asked of etcd through etcdctl.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from '../../src/etcd/ports.js';
import { stringify } from 'yaml';
import { waitFor } from '../../test/support/wait.js';
import { fetchConfig, initializationHandshake } from '../support/wrapper.js';
import { ManagedProcess, type ExitRecord } from './processes.js';
import type { Topology } from './schedule.js';

const run = promisify(execFile);
export const ETCDBRCTL = fileURLToPath(new URL('../../bin/etcdbrctl', import.meta.url));

export interface SoakPaths {
  runDir: string;
  etcd: string;
  etcdctl: string;
}

export interface Member {
  index: number;
  name: string;
  clientUrl: string;
  peerUrl: string;
  dataDir: string;
  sidecarUrl: string;
  /** Whether the member's snapstore temp dir is a small tmpfs of its own (mounted when running as root). */
  tmpfs: boolean;
  tempDir: string;
  /** Three members: where the config the sidecar served (`/config`) is written for etcd's `--config-file`. */
  configFile: string;
  etcd: ManagedProcess;
  sidecar: ManagedProcess;
}

export interface ClusterOptions {
  topology: Topology;
  /** The store flags every sidecar gets (and the checker's restore and verify). */
  storeFlags: string[];
  /** Environment of the sidecars (store credentials). */
  storeEnv: NodeJS.ProcessEnv;
  deltaPeriodSeconds: number;
  /** The full snapshot schedule (cron). */
  schedule: string;
}

export class SoakCluster {
  readonly exits: ExitRecord[] = [];
  readonly members: Member[] = [];

  private constructor(
    private readonly paths: SoakPaths,
    private readonly opts: ClusterOptions,
  ) {}

  static async create(paths: SoakPaths, opts: ClusterOptions): Promise<SoakCluster> {
    const c = new SoakCluster(paths, opts);
    const n = opts.topology === 'three' ? 3 : 1;
    const ports: Array<{ client: number; peer: number; sidecar: number }> = [];
    for (let i = 0; i < n; i++) ports.push({ client: await freePort(), peer: await freePort(), sidecar: await freePort() });
    const initialCluster = ports.map((p, i) => `m${i}=http://127.0.0.1:${p.peer}`).join(',');
    for (let i = 0; i < n; i++) {
      const name = `m${i}`;
      const dir = join(paths.runDir, name);
      mkdirSync(join(dir, 'tmp'), { recursive: true });
      const tmpfs = mountTmpfs(join(dir, 'tmp'));
      const p = ports[i]!;
      const clientUrl = `http://127.0.0.1:${p.client}`;
      const peerUrl = `http://127.0.0.1:${p.peer}`;
      const dataDir = join(dir, 'data');
      const configFile = join(dir, 'etcd.conf.yaml');
      const template = join(dir, 'etcd-template.yaml');
      if (n > 1) {
        // The etcd config template etcd-druid mounts for the sidecar (ETCD_CONF); the sidecar serves it,
        // completed, on /config.
        writeFileSync(
          template,
          stringify({
            name,
            'data-dir': dataDir,
            'listen-client-urls': clientUrl,
            'listen-peer-urls': peerUrl,
            'advertise-client-urls': Object.fromEntries(ports.map((q, j) => [`m${j}`, [`http://127.0.0.1:${q.client}`]])),
            'initial-advertise-peer-urls': Object.fromEntries(ports.map((q, j) => [`m${j}`, [`http://127.0.0.1:${q.peer}`]])),
            'initial-cluster': initialCluster,
            'initial-cluster-token': 'soak',
            'initial-cluster-state': 'new',
            'auto-compaction-retention': '0',
          }),
        );
      }
      const etcdArgs = () =>
        n > 1
          ? [`--config-file=${configFile}`]
          : [
              `--name=${name}`,
              `--data-dir=${dataDir}`,
              `--listen-client-urls=${clientUrl}`,
              `--advertise-client-urls=${clientUrl}`,
              `--listen-peer-urls=${peerUrl}`,
              `--initial-advertise-peer-urls=${peerUrl}`,
              `--initial-cluster=${initialCluster}`,
              '--initial-cluster-token=soak',
              '--initial-cluster-state=new',
              // No auto-compaction: the checker reads history at any revision of the run.
              '--auto-compaction-retention=0',
              '--heartbeat-interval=10',
              '--election-timeout=100',
            ];
      const sidecarArgs = () => [
        ETCDBRCTL,
        'server',
        `--server-port=${p.sidecar}`,
        `--endpoints=${clientUrl}`,
        ...opts.storeFlags,
        `--snapstore-temp-directory=${join(dir, 'tmp')}`,
        `--schedule=${opts.schedule}`,
        `--delta-snapshot-period=${opts.deltaPeriodSeconds}s`,
        '--garbage-collection-period=1h',
        '--reelection-period=2s',
        '--backoff-multiplier=2',
        '--backoff-attempt-limit=0',
        '--backoff-threshold-time=1s',
        ...(n === 1
          ? []
          : [
              `--data-dir=${dataDir}`,
              `--name=${name}`,
              `--initial-cluster=${initialCluster}`,
              `--initial-advertise-peer-urls=${peerUrl}`,
              '--initial-cluster-token=soak',
              '--etcd-connection-timeout-leader-election=2s',
            ]),
      ];
      c.members.push({
        index: i,
        name,
        clientUrl,
        peerUrl,
        dataDir,
        sidecarUrl: `http://127.0.0.1:${p.sidecar}`,
        configFile,
        tmpfs,
        tempDir: join(dir, 'tmp'),
        etcd: new ManagedProcess(`etcd ${name}`, paths.etcd, etcdArgs, join(dir, 'etcd.log'), c.exits),
        sidecar: new ManagedProcess(`sidecar ${name}`, process.execPath, sidecarArgs, join(dir, 'sidecar.log'), c.exits, {
          ...process.env,
          ...opts.storeEnv,
          POD_NAME: name,
          ...(n > 1 ? { ETCD_CONF: template } : {}),
        }),
      });
    }
    return c;
  }

  get clientUrls(): string[] {
    return this.members.map((m) => m.clientUrl);
  }

  async startAll(): Promise<void> {
    if (this.members.length === 1) {
      for (const m of this.members) m.etcd.start();
      for (const m of this.members) await this.etcdReady(m);
      for (const m of this.members) m.sidecar.start();
      return;
    }
    for (const m of this.members) m.sidecar.start();
    await Promise.all(this.members.map((m) => this.startEtcd(m)));
    for (const m of this.members) await this.etcdReady(m);
  }

  /**
   * Starts a member's etcd as its container would: one member directly; three members the etcd-wrapper way
   * (the sidecar's `/initialization/start`, `/initialization/status` until Successful, then `/config`
   * written to the file etcd starts on), waiting for the sidecar to be up first.
   */
  async startEtcd(m: Member): Promise<void> {
    if (this.members.length === 1) {
      m.etcd.start();
      return;
    }
    await waitFor(
      async () => (await fetch(`${m.sidecarUrl}/initialization/status`, { signal: AbortSignal.timeout(5_000) })).ok,
      `sidecar ${m.name} to answer /initialization/status`,
      300_000,
      200,
    );
    // etcd-wrapper retries a failed initialization without end (a member waiting for quorum fails until the
    // others are back); the soak bounds it at 10 minutes.
    const handshake = await initializationHandshake(m.sidecarUrl, { maxFailures: 1_000, timeoutMs: 600_000 });
    if (!handshake.ok) throw new Error(`the sidecar of ${m.name} failed its initialization: ${handshake.seen.slice(-8).join(' -> ')}`);
    const { text } = await fetchConfig(m.sidecarUrl);
    writeFileSync(m.configFile, text, { mode: 0o600 });
    m.etcd.start();
  }

  /** Member ids as etcd names them (hex), by member name. */
  async memberIds(): Promise<Map<string, string>> {
    const up = this.members.filter((m) => m.etcd.running);
    const { stdout } = await run(
      this.paths.etcdctl,
      [`--endpoints=${up.map((m) => m.clientUrl).join(',')}`, '--command-timeout=5s', 'member', 'list'],
      {
        env: { ...process.env, ETCDCTL_API: '3' },
      },
    );
    const ids = new Map<string, string>();
    for (const line of stdout.split('\n')) {
      const [id, , name] = line.split(',').map((x) => x.trim());
      if (id && name) ids.set(name, id);
    }
    return ids;
  }

  /** Whether every member is a started voting member (no learner, none missing), as etcd lists them. */
  async allVoting(): Promise<boolean> {
    const up = this.members.filter((m) => m.etcd.running);
    if (up.length === 0) return false;
    try {
      const { stdout } = await run(
        this.paths.etcdctl,
        [`--endpoints=${up.map((m) => m.clientUrl).join(',')}`, '--command-timeout=5s', 'member', 'list'],
        {
          env: { ...process.env, ETCDCTL_API: '3' },
        },
      );
      const rows = stdout
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => l.split(',').map((x) => x.trim()));
      return rows.length === this.members.length && rows.every((r) => r[1] === 'started' && r.at(-1) === 'false');
    } catch {
      return false;
    }
  }

  /** `etcdctl move-leader` from the current leader to `to`. */
  async moveLeader(from: Member, to: Member): Promise<void> {
    const id = (await this.memberIds()).get(to.name);
    if (!id) throw new Error(`${to.name} is not in the member list`);
    await run(this.paths.etcdctl, [`--endpoints=${from.clientUrl}`, '--command-timeout=10s', 'move-leader', id], {
      env: { ...process.env, ETCDCTL_API: '3' },
    });
  }

  /** Waits until the member answers /health with a leader known (etcd 3.4: `{"health":"true"}`). */
  async etcdReady(m: Member, timeoutMs = 60_000): Promise<void> {
    await waitFor(
      async () => {
        if (!m.etcd.running) throw new Error(`${m.name} is not running`);
        const r = await fetch(`${m.clientUrl}/health`, { signal: AbortSignal.timeout(2_000) });
        const body = (await r.json()) as { health?: string };
        return body.health === 'true';
      },
      `etcd ${m.name} to be healthy`,
      timeoutMs,
      100,
    );
  }

  async sidecarReady(m: Member, timeoutMs = 60_000): Promise<void> {
    await waitFor(
      async () => (await fetch(`${m.sidecarUrl}/healthz`, { signal: AbortSignal.timeout(2_000) })).status === 200,
      `sidecar ${m.name} healthz 200`,
      timeoutMs,
      200,
    );
  }

  /** The index of the member etcd reports as leader, asked of the running members; undefined if none knows. */
  async leaderIndex(): Promise<number | undefined> {
    const up = this.members.filter((m) => m.etcd.running);
    if (up.length === 0) return undefined;
    try {
      const { stdout } = await run(
        this.paths.etcdctl,
        [`--endpoints=${up.map((m) => m.clientUrl).join(',')}`, '--command-timeout=2s', 'endpoint', 'status', '-w', 'json'],
        { env: { ...process.env, ETCDCTL_API: '3' } },
      );
      // Member ids are 64-bit: compared as the digits etcdctl printed, never as JS numbers.
      const exact = stdout.replace(/"(member_id|leader|cluster_id)":(\d+)/g, '"$1":"$2"');
      const rows = JSON.parse(exact) as Array<{
        Endpoint: string;
        Status: { header: { member_id: number | string }; leader: number | string };
      }>;
      for (const row of rows) {
        if (String(row.Status.header.member_id) === String(row.Status.leader))
          return this.members.findIndex((m) => m.clientUrl === row.Endpoint);
      }
    } catch {
      // No member answers in time (one starting, quorum lost): nobody known to lead.
    }
    return undefined;
  }

  async stopAll(): Promise<void> {
    for (const m of this.members) await m.sidecar.close();
    for (const m of this.members) await m.etcd.close();
    for (const m of this.members) if (m.tmpfs) execFileSync('umount', [m.tempDir]);
  }
}

/** A 16 MiB tmpfs on `dir` when we are root and may mount; false (a plain directory) otherwise. */
function mountTmpfs(dir: string): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m,mode=0700', 'tmpfs', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
