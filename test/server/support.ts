import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { newSnapshot } from '@etcdbrctl/snapstore';
import type { Snapshot, SnapStore } from '@etcdbrctl/snapstore';
import { pino } from 'pino';
import type { HttpServerConfig } from '../../src/config/types.js';
import { Metrics } from '../../src/metrics.js';
import { buildHttpServer } from '../../src/server/app.js';
import type { HttpServer } from '../../src/server/app.js';
import { HealthState } from '../../src/server/health.js';
import type { HttpServerDeps, SnapshotterControl } from '../../src/server/types.js';
import { writeSelfSignedCert } from '../support/certs.js';
import { openLocalStore } from '../support/local-store.js';

/** Everything a test started; `cleanup()` stops servers and removes directories, also after failures. */
export class Resources {
  private readonly closers: Array<() => Promise<void>> = [];

  add(close: () => Promise<void>): void {
    this.closers.push(close);
  }

  async tmpDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-server-test-'));
    this.add(() => rm(dir, { recursive: true, force: true }));
    return dir;
  }

  async cleanup(): Promise<void> {
    const errors: unknown[] = [];
    for (const close of this.closers.splice(0).reverse()) {
      try {
        await close();
      } catch (err) {
        errors.push(err);
      }
    }
    if (errors.length > 0) throw new AggregateError(errors, 'cleanup failed');
  }
}

export const silentLogger = pino({ level: 'silent' });

export function httpConfig(over: Partial<HttpServerConfig> = {}): HttpServerConfig {
  return { port: 0, address: '', enableProfiling: false, serverCert: '', serverKey: '', ...over };
}

export interface Started {
  server: HttpServer;
  url: string;
  health: HealthState;
  metrics: Metrics;
}

/** Builds and starts a server on a free loopback port; it is stopped by `res.cleanup()`. */
export async function startServer(res: Resources, deps: Partial<HttpServerDeps> = {}): Promise<Started> {
  const health = deps.health ?? new HealthState();
  const metrics = deps.metrics ?? new Metrics({ defaultMetrics: false });
  const server = await buildHttpServer({
    config: httpConfig(),
    logger: silentLogger,
    snapshots: () => undefined,
    store: () => undefined,
    host: '127.0.0.1',
    ...deps,
    health,
    metrics,
  });
  res.add(() => server.close());
  const { url } = await server.listen();
  return { server, url, health, metrics };
}

/** A Local store in a temp dir, the way the CLI opens it (effective prefix `v2`). */
export async function localStore(res: Resources): Promise<SnapStore> {
  const dir = await res.tmpDir();
  const store = await openLocalStore(dir, dir);
  res.add(() => store.close());
  return store;
}

export async function saveSnapshot(store: SnapStore, snap: Snapshot): Promise<void> {
  await store.save(snap, Readable.from([Buffer.from(`payload of ${snap.snapName}`)]));
}

export function snap(kind: 'Full' | 'Incr', start: number, last: number, unix: number, opts: { final?: boolean } = {}): Snapshot {
  return newSnapshot({
    kind,
    startRevision: start,
    lastRevision: last,
    createdOn: new Date(unix * 1000),
    compressionSuffix: '.gz',
    isFinal: opts.final ?? false,
  });
}

/** A snapshotter stand-in that records its calls. */
export interface FakeSnapshotter extends SnapshotterControl {
  fullCalls: boolean[];
  deltaCalls: number;
}

export function fakeSnapshotter(
  opts: {
    full?: (isFinal: boolean) => Promise<Snapshot>;
    delta?: () => Promise<Snapshot | undefined>;
  } = {},
): FakeSnapshotter {
  const fake: FakeSnapshotter = {
    fullCalls: [],
    deltaCalls: 0,
    async triggerFullSnapshot(isFinal) {
      fake.fullCalls.push(isFinal);
      return opts.full ? opts.full(isFinal) : snap('Full', 0, 42, 1_700_000_000, { final: isFinal });
    },
    async triggerDeltaSnapshot() {
      fake.deltaCalls++;
      return opts.delta ? opts.delta() : undefined;
    },
  };
  return fake;
}

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A plain Node request, so tests see the exact status, headers and bytes (and can trust a CA). */
export function request(
  url: string,
  opts: { method?: string; body?: string; headers?: Record<string, string>; ca?: Buffer } = {},
): Promise<Answer> {
  const target = new URL(url);
  const fn = target.protocol === 'https:' ? https.request : http.request;
  return new Promise((resolve, reject) => {
    const req = fn(
      target,
      { method: opts.method ?? 'GET', headers: opts.headers, agent: false, ...(opts.ca ? { ca: opts.ca } : {}) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

export interface SelfSigned {
  certFile: string;
  keyFile: string;
  cert: Buffer;
}

/** A throw-away self-signed certificate for 127.0.0.1 and localhost. */
export async function selfSigned(res: Resources): Promise<SelfSigned> {
  const { certFile, keyFile } = await writeSelfSignedCert(await res.tmpDir(), 'localhost');
  return { certFile, keyFile, cert: await readFile(certFile) };
}
