/**
 * A real OpenStack Swift all-in-one for tests, from Debian's packages (swift, swift-proxy, swift-object,
 * swift-container, swift-account; `scripts/setup.mjs --tests` installs them): rings with one device,
 * account, container and object servers and a proxy, each a single-process server (`workers = 0`) on
 * a free loopback port, all data in a fresh temp dir. The proxy has no auth middleware; it sits behind
 * the fake Keystone's token-checking gateway (fake-keystone.ts), which is what clients talk to.
 * The cluster-wide /etc/swift/swift.conf (hash path prefix/suffix, storage policy) is the package's.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '../../../test/support/wait.js';
import { closedPort } from './ports.js';

export interface SwiftAio {
  /** `http://127.0.0.1:<port>` of the proxy (no auth). */
  proxy: string;
  /** The account every test uses: `AUTH_<project>`. */
  account: string;
  /** Creates a container (PUT; 201 or 202). */
  createContainer(name: string): Promise<void>;
  /** All object names in a container, straight from the proxy (no auth). */
  objectNames(container: string): Promise<string[]>;
  /** PUT of raw bytes (and headers, e.g. X-Object-Manifest) bypassing any client under test. */
  putObject(container: string, name: string, data: Buffer, headers?: Record<string, string>): Promise<void>;
  stop(): Promise<void>;
}

const BINARIES = ['swift-proxy-server', 'swift-object-server', 'swift-container-server', 'swift-account-server'];

/** The interpreter the packages' scripts run on (their shebang), which has the `swift` module. */
const SWIFT_PYTHON = '/usr/bin/python3';

/**
 * Builds the three rings (one device each) in one Python process through Swift's RingBuilder: the
 * swift-ring-builder CLI needs three runs per ring, and each run pays Python's start-up and Swift's
 * imports (about 3 s apiece on a loaded 2-core machine, so half a minute for nine).
 */
const RING_SCRIPT = `
import json, sys
from swift.common.ring import RingBuilder
swift_dir, ports = sys.argv[1], json.loads(sys.argv[2])
for ring, port in ports.items():
    b = RingBuilder(2, 1, 1)
    b.add_dev({'region': 1, 'zone': 1, 'ip': '127.0.0.1', 'port': port, 'device': 'd1', 'weight': 1})
    b.rebalance()
    b.get_ring().save('%s/%s.ring.gz' % (swift_dir, ring))
`;

function requireSwift(): void {
  for (const b of BINARIES) {
    try {
      execFileSync('which', [b], { stdio: 'ignore' });
    } catch {
      throw new Error(
        `${b} not found: the Swift tests need OpenStack Swift. Run \`node scripts/setup.mjs --tests\` as root, or apt-get install swift swift-proxy swift-object swift-container swift-account`,
      );
    }
  }
}

function serverConf(kind: string, dir: string, port: number): string {
  return [
    '[DEFAULT]',
    `devices = ${join(dir, 'devices')}`,
    'mount_check = false',
    'bind_ip = 127.0.0.1',
    `bind_port = ${port}`,
    'workers = 0',
    `swift_dir = ${dir}`,
    'log_level = WARNING',
    '[pipeline:main]',
    `pipeline = ${kind}-server`,
    `[app:${kind}-server]`,
    `use = egg:swift#${kind}`,
    '',
  ].join('\n');
}

function proxyConf(dir: string, port: number): string {
  return [
    '[DEFAULT]',
    'bind_ip = 127.0.0.1',
    `bind_port = ${port}`,
    'workers = 0',
    `swift_dir = ${dir}`,
    'log_level = WARNING',
    '[pipeline:main]',
    'pipeline = catch_errors gatekeeper proxy-logging listing_formats bulk dlo proxy-server',
    '[filter:catch_errors]',
    'use = egg:swift#catch_errors',
    '[filter:gatekeeper]',
    'use = egg:swift#gatekeeper',
    '[filter:proxy-logging]',
    'use = egg:swift#proxy_logging',
    '[filter:listing_formats]',
    'use = egg:swift#listing_formats',
    '[filter:bulk]',
    'use = egg:swift#bulk',
    '[filter:dlo]',
    'use = egg:swift#dlo',
    '[app:proxy-server]',
    'use = egg:swift#proxy',
    'account_autocreate = true',
    // A backend that was still starting must not be error-limited for a minute afterwards.
    'error_suppression_limit = 1000',
    '',
  ].join('\n');
}

function call(method: string, url: string, body?: Buffer, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method, headers: { ...headers, ...(body ? { 'content-length': String(body.length) } : {}) } },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
}

export async function startSwiftAio(project = 'test'): Promise<SwiftAio> {
  requireSwift();
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-swift-'));
  const children: ChildProcess[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(
      children.map(async (c) => {
        if (c.exitCode !== null || c.signalCode !== null) return;
        const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
        c.kill('SIGTERM');
        const t = setTimeout(() => c.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      }),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await mkdir(join(dir, 'devices', 'd1'), { recursive: true });
    const ports = { object: await closedPort(), container: await closedPort(), account: await closedPort(), proxy: await closedPort() };
    const rings = { account: ports.account, container: ports.container, object: ports.object };
    execFileSync(SWIFT_PYTHON, ['-c', RING_SCRIPT, dir, JSON.stringify(rings)], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    const start = (bin: string, conf: string): void => {
      const c = spawn(bin, [conf], { stdio: ['ignore', 'ignore', 'pipe'] });
      c.stderr?.setEncoding('utf8').on('data', (d: string) => (log = (log + d).slice(-4000)));
      children.push(c);
    };
    for (const kind of ['object', 'container', 'account'] as const) {
      const conf = join(dir, `${kind}.conf`);
      await writeFile(conf, serverConf(kind, dir, ports[kind]));
      start(`swift-${kind}-server`, conf);
    }
    // The proxy starts with the backends (their Python start-ups overlap); it does not error-limit a backend
    // that is still starting (error_suppression_limit), and the readiness probe below goes through all of them.
    const conf = join(dir, 'proxy.conf');
    await writeFile(conf, proxyConf(dir, ports.proxy));
    start('swift-proxy-server', conf);
    for (const kind of ['object', 'container', 'account'] as const) {
      await waitFor(async () => ((await connects(ports[kind])) ? true : undefined), `the Swift ${kind} server to listen (${log})`, 60_000);
    }

    const proxy = `http://127.0.0.1:${ports.proxy}`;
    const account = `AUTH_${project}`;
    // Ready when the account (auto-created) answers a container PUT through all three servers.
    await waitFor(
      async () => {
        if (children.some((c) => c.exitCode !== null)) throw new Error(`a Swift server exited:\n${log}`);
        const r = await call('PUT', `${proxy}/v1/${account}/readiness`);
        return r.status === 201 || r.status === 202 ? true : undefined;
      },
      `the Swift all-in-one to answer (${log})`,
      60_000,
    );
    return {
      proxy,
      account,
      async createContainer(name) {
        const r = await call('PUT', `${proxy}/v1/${account}/${encodeURIComponent(name)}`);
        if (r.status !== 201 && r.status !== 202) throw new Error(`creating container ${name}: HTTP ${r.status} ${r.body}`);
      },
      async objectNames(container) {
        const names: string[] = [];
        let marker = '';
        for (;;) {
          const q = new URLSearchParams({ format: 'json', ...(marker ? { marker } : {}) });
          const r = await call('GET', `${proxy}/v1/${account}/${encodeURIComponent(container)}?${q.toString()}`);
          if (r.status === 204) break;
          if (r.status !== 200) throw new Error(`listing ${container}: HTTP ${r.status} ${r.body}`);
          const page = JSON.parse(r.body) as { name: string }[];
          if (page.length === 0) break;
          names.push(...page.map((o) => o.name));
          marker = page[page.length - 1]?.name ?? '';
        }
        return names.sort();
      },
      async putObject(container, name, data, headers = {}) {
        const path = name.split('/').map(encodeURIComponent).join('/');
        const r = await call('PUT', `${proxy}/v1/${account}/${encodeURIComponent(container)}/${path}`, data, headers);
        if (r.status !== 201) throw new Error(`PUT ${name}: HTTP ${r.status} ${r.body}`);
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
