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

const BINARIES = ['swift-ring-builder', 'swift-proxy-server', 'swift-object-server', 'swift-container-server', 'swift-account-server'];

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
    for (const ring of ['account', 'container', 'object'] as const) {
      const builder = join(dir, `${ring}.builder`);
      execFileSync('swift-ring-builder', [builder, 'create', '2', '1', '1'], { stdio: 'ignore' });
      execFileSync('swift-ring-builder', [builder, 'add', `r1z1-127.0.0.1:${ports[ring]}/d1`, '1'], { stdio: 'ignore' });
      execFileSync('swift-ring-builder', [builder, 'rebalance'], { stdio: 'ignore' });
    }
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
    // The proxy starts once the backends listen, so its first requests find them up.
    for (const kind of ['object', 'container', 'account'] as const) {
      await waitFor(async () => ((await connects(ports[kind])) ? true : undefined), `the Swift ${kind} server to listen (${log})`, 60_000);
    }
    const conf = join(dir, 'proxy.conf');
    await writeFile(conf, proxyConf(dir, ports.proxy));
    start('swift-proxy-server', conf);

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
