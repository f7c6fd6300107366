/**
 * A sidecar pays for every module it loads: the Kubernetes client alone holds about 85 MB, each cloud SDK tens
 * more. This runs the compiled `etcdbrctl server` with a hook that logs every module it loads, lets it take a
 * full and a delta snapshot, and checks which packages are in the log: never a Kubernetes client library (our
 * own REST client in src/k8s loads when a Kubernetes feature is on), a store's SDK only for its provider, yaml,
 * age and zstd only when used. Each case
 * also asserts what must be loaded, so a hook that logged nothing could not pass. `etcdbrctl restore` of a
 * Go-written chain: the offline replay loads neither the online replay nor any etcd client (no node:http2);
 * `--delta-replay=online` of the same chain does, which shows the check sees them. The CLI runs bundled
 * (scripts/build.mjs): each chunk in the log stands for the modules it holds.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver, type S3rverInstance } from '../snapstore/test/support/s3rver.js';
import { LEASES } from '../test/support/fake-kube.js';
import { useFakeKube } from '../test/support/fake-kube-fixture.js';
import { startTestEtcd, type TestEtcd } from '../test/support/etcd.js';
import { UPSTREAM_V023 } from '../test/support/fixtures.js';
import { BIN, LEASE_RENEWAL_FLAGS, localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

const HOOK = fileURLToPath(new URL('./support/module-log-hook.mjs', import.meta.url));

/** The npm packages of the cloud stores, by the provider that needs them. */
const CLOUD_SDKS = ['@aws-sdk/', '@smithy/', '@azure/', '@google-cloud/', 'ali-oss'] as const;
/**
 * Heavy packages that are installed (the storage package's dependencies, and etcd3 with its gRPC stack as a
 * test dependency): the checks that they stay unloaded guard something only while they are there to load.
 */
const INSTALLED_HEAVY = [
  '@aws-sdk/client-s3',
  '@azure/storage-blob',
  '@google-cloud/storage',
  'ali-oss',
  'age-encryption',
  'zstd-napi',
  'yaml',
  'etcd3',
  '@grpc/grpc-js',
];

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** `names` and every package they depend on, as installed (node_modules at the root, hoisted or nested one level). */
function dependencyClosure(names: readonly string[]): Set<string> {
  const seen = new Set<string>();
  const todo = [...names];
  while (todo.length > 0) {
    const name = todo.pop()!;
    if (seen.has(name)) continue;
    seen.add(name);
    const manifest = join(ROOT, 'node_modules', name, 'package.json');
    if (!existsSync(manifest)) continue;
    const deps = (JSON.parse(readFileSync(manifest, 'utf8')) as { dependencies?: Record<string, string> }).dependencies ?? {};
    todo.push(...Object.keys(deps));
  }
  return seen;
}

/**
 * What the sidecar always loads: its logger and metrics, our own workspace packages, and the runtime of the
 * protobuf code generated from etcd's .proto files (src/etcd/gen: @bufbuild/protobuf's wire-format reader and
 * writer), with their dependencies.
 */
const ALWAYS = ['pino', 'prom-client', '@etcdbrctl/snapstore', '@etcdbrctl/malloc-trim', '@bufbuild/protobuf'];

/** The loaded packages outside `allowed` (empty when the process loaded only what its case uses). */
const beyond = (packages: Set<string>, allowed: Set<string>): string[] => [...packages].filter((p) => !allowed.has(p)).sort();

/** The packages (scope/name) a module log names, from their node_modules paths. */
function packagesOf(log: string): Set<string> {
  const found = new Set<string>();
  for (const line of log.split('\n')) {
    const m = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(line);
    if (m) found.add(m[1] as string);
  }
  return found;
}

/** The modules of @bufbuild/protobuf a module log names, as paths in its dist/esm/ (`wire/binary-encoding.js`). */
function protobufModulesOf(log: string): string[] {
  return [...log.matchAll(/\/node_modules\/@bufbuild\/protobuf\/dist\/esm\/(.+\.js)$/gm)].map((m) => m[1] as string);
}

/**
 * The parts of @bufbuild/protobuf the generated code does without: embedded descriptors and what decodes them
 * (codegenv1/v2, the registry, the well-known types' descriptors in wkt/gen), and JSON. Loading them cost the
 * idle sidecar 2-3.6 MiB while the generated code ran on them (docs/design-decisions.md, "One etcd transport").
 */
const PROTOBUF_REFLECTION = /^(codegenv\d|wkt\/gen|registry|to-json|from-json|json-value|reflect\/names)/;

/** The modules of @bufbuild/protobuf the generated code needs: the binary reader and writer, and what they import. */
const PROTOBUF_WIRE = ['proto-int64.js', 'wire/binary-encoding.js', 'wire/text-encoding.js', 'wire/varint.js'];

/**
 * The module log with each output of the bundled CLI (dist/etcdbrctl.js and its chunks, scripts/build.mjs)
 * replaced by the modules it holds, as the file URLs they had before bundling: a chunk is loaded whole, and
 * code splitting gives every dynamic import a chunk of its own, so the modules a process loaded are still the
 * ones it uses. dist/etcdbrctl.meta.json, written with the bundle, names them.
 */
function expandBundle(log: string): string {
  const chunks = JSON.parse(readFileSync(join(ROOT, 'dist', 'etcdbrctl.meta.json'), 'utf8')) as Record<string, string[]>;
  const rootUrl = pathToFileURL(ROOT);
  const distUrl = new URL('dist/', rootUrl).href;
  return log
    .split('\n')
    .flatMap((line) => {
      const inputs = line.startsWith(distUrl) ? chunks[line.slice(distUrl.length)] : undefined;
      return inputs ? inputs.map((m) => new URL(m, rootUrl).href) : [line];
    })
    .join('\n');
}

/** The log names an output of the bundled CLI: the process ran the bundle, not the separate modules. */
const ranBundled = (log: string): boolean => log.includes('/dist/etcdbrctl.js');

/** Our own modules (paths under dist/) and node: builtins a module log names, one each. */
function ownModulesOf(log: string): Set<string> {
  const found = new Set<string>();
  for (const line of log.split('\n')) {
    const m = /\/dist\/(.+\.js)$/.exec(line) ?? /^(node:.+)$/.exec(line);
    if (m && !line.includes('/node_modules/')) found.add(m[1] as string);
  }
  return found;
}

/** What only the online replay needs: its own modules, our etcd client (its transport, messages and lean path), and Node's HTTP/2. */
const ONLINE_ONLY = [
  'restorer/online-replay.js',
  'restorer/replay-etcd.js',
  'restorer/replay-txns.js',
  'etcd/lean-h2.js',
  'etcd/lean-h2-calls.js',
  'etcd/h2-frames.js',
  'etcd/h2-frame-reader.js',
  'etcd/h2-frame-writer.js',
  'etcd/hpack-request.js',
  'etcd/lean-txns.js',
  'etcd/calls.js',
  'etcd/grpc.js',
  'etcd/grpc-frame.js',
  'etcd/methods.js',
  'etcd/gen/etcd/api/etcdserverpb/rpc_pb.js',
  'node:http2',
] as const;

const loadedAny = (packages: Set<string>, prefix: string): string[] => [...packages].filter((p) => p === prefix || p.startsWith(prefix));

describe('etcdbrctl server loads only what its flags use', () => {
  let etcd: TestEtcd;
  let dir: string;
  let sidecar: SidecarProcess | undefined;
  const ns = 'shoot--dev--e2e';
  const k8s = useFakeKube({
    seed: (fake) => {
      for (const name of ['etcd-main-full-snap', 'etcd-main-delta-snap', 'etcd-main-0'])
        fake.seed(LEASES, { metadata: { name, namespace: ns }, spec: {} });
    },
  });

  beforeAll(async () => {
    etcd = await startTestEtcd();
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-modules-'));
    await writeFile(join(dir, 'kubeconfig'), k8s.fake.kubeconfig());
  });

  afterAll(async () => {
    await sidecar?.stop('SIGKILL');
    await etcd?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Runs the server until it stored a full and a delta snapshot, stops it, and returns the packages it loaded. */
  async function packagesLoadedBy(
    name: string,
    args: string[],
    env: NodeJS.ProcessEnv = {},
  ): Promise<Set<string> & { ownKubeClient: boolean; leanClient: boolean; builtins: Set<string>; protobuf: string[] }> {
    const log = join(dir, `${name}.modules`);
    await writeFile(log, '');
    sidecar = await startSidecar([`--endpoints=${etcd.clientUrl}`, '--schedule=0 0 1 1 *', '--delta-snapshot-period=1s', ...args], {
      ...env,
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${HOOK}`,
      ETCDBRCTL_MODULE_LOG: log,
    });
    const s = sidecar;
    await waitFor(async () => {
      const r = await fetch(`${s.url}/snapshot/latest`);
      return ((await r.json()) as { fullSnapshot: unknown }).fullSnapshot ?? undefined;
    }, `${name}: a full snapshot`);
    await fetch(`${etcd.clientUrl}/v3/kv/put`, { method: 'POST', body: JSON.stringify({ key: btoa(name), value: btoa('v') }) });
    await waitFor(async () => {
      const r = await fetch(`${s.url}/snapshot/latest`);
      const j = (await r.json()) as { deltaSnapshots?: unknown[] | null };
      return (j.deltaSnapshots?.length ?? 0) > 0 ? true : undefined;
    }, `${name}: a delta snapshot`);
    expect(await s.stop()).toBe(0);
    sidecar = undefined;
    const raw = await readFile(log, 'utf8');
    expect(ranBundled(raw)).toBe(true);
    const text = expandBundle(raw);
    const builtins = new Set([...text.matchAll(/^builtin:(.+)$/gm)].map((m) => m[1] as string));
    return Object.assign(packagesOf(text), {
      ownKubeClient: /\/k8s\/http\.js$/m.test(text),
      leanClient: /\/etcd\/lean-h2\.js$/m.test(text),
      builtins,
      protobuf: protobufModulesOf(text),
    });
  }

  it('every heavy package these checks keep out is installed (a check on a package that is not there guards nothing)', () => {
    expect(INSTALLED_HEAVY.filter((p) => !existsSync(join(ROOT, 'node_modules', p, 'package.json')))).toEqual([]);
  });

  it('Local store, Kubernetes off: neither the Kubernetes client nor any cloud SDK', async () => {
    const packages = await packagesLoadedBy('local', localStoreFlags(join(dir, 'local-store'), join(dir, 'tmp')));
    // What the server does use is in the log: the hook saw the process load its packages.
    expect(loadedAny(packages, 'prom-client')).toContain('prom-client');
    // Our own etcd transport (src/etcd/grpc.ts) and our own cron walk: no gRPC library, no cron library.
    expect(['etcd3', '@grpc/', 'protobufjs', 'cron-parser', 'luxon'].flatMap((p) => loadedAny(packages, p))).toEqual([]);
    // The HTTP API is Node's own server (src/server/http-router.ts): no framework, no schema validator.
    expect(['fastify', 'ajv', 'avvio', 'find-my-way'].flatMap((p) => loadedAny(packages, p))).toEqual([]);
    // Exactly: every package outside the logger's, the metrics' and our own is one the case must not load.
    expect(beyond(packages, dependencyClosure(ALWAYS))).toEqual([]);
    // Of the protobuf runtime, the wire format only: nothing that decodes descriptors or speaks JSON.
    expect(packages.protobuf).toContain('wire/binary-encoding.js');
    expect(packages.protobuf.filter((m) => PROTOBUF_REFLECTION.test(m))).toEqual([]);
    // Exactly the reader and writer with what they import: the package is bundled (scripts/build.mjs), so its
    // index of wire/ no longer brings size-delimited.js and, through it, the reflection API (15 more modules).
    expect([...packages.protobuf].sort()).toEqual(PROTOBUF_WIRE);
    // prom-client's tracing API (for exemplars, which we never turn on) loads on first use only
    // (scripts/on-demand/opentelemetry-api.cjs): 45 modules.
    expect(loadedAny(packages, '@opentelemetry/')).toEqual([]);
    expect(packages.ownKubeClient).toBe(false);
    // The online replay's lean HTTP/2 client loads when a restore replays online, not with the etcd client.
    expect(packages.leanClient).toBe(false);
    expect(CLOUD_SDKS.flatMap((sdk) => loadedAny(packages, sdk))).toEqual([]);
    // No config file, no /config request, no encryption flags, gzip: none of their libraries.
    expect(['yaml', 'age-encryption', 'zstd-napi'].flatMap((p) => loadedAny(packages, p))).toEqual([]);
    // Node's bundled undici (fetch, WebSocket) never loads: node:http reaches our ES modules through require
    // (snapstore/src/node-http.ts). The list is Node's own, so what the server uses is on it.
    expect(packages.builtins).toContain('http2');
    expect(packages.builtins).toContain('http');
    expect(packages.builtins).not.toContain('internal/deps/undici/undici');
  });

  describe('S3 store with lease renewal', () => {
    let s3: S3rverInstance;
    beforeAll(async () => {
      s3 = await startS3rver({ bucket: 'backups' });
    });
    afterAll(async () => {
      await s3?.stop();
    });

    it('loads our Kubernetes client (never a Kubernetes library), yaml for the kubeconfig, and the AWS SDK only', async () => {
      const creds = join(dir, 's3-credentials.json');
      await writeFile(
        creds,
        JSON.stringify({
          accessKeyID: S3RVER_ACCESS_KEY,
          secretAccessKey: S3RVER_SECRET_KEY,
          region: 'us-east-1',
          endpoint: s3.endpoint,
          s3ForcePathStyle: true,
        }),
      );
      const packages = await packagesLoadedBy(
        's3-kube',
        ['--storage-provider=S3', '--store-container=backups', `--snapstore-temp-directory=${join(dir, 'tmp')}`, ...LEASE_RENEWAL_FLAGS],
        { KUBECONFIG: join(dir, 'kubeconfig'), POD_NAMESPACE: ns, POD_NAME: 'etcd-main-0', AWS_APPLICATION_CREDENTIALS_JSON: creds },
      );
      expect(packages.ownKubeClient).toBe(true);
      // Exactly: the AWS SDK (with what it needs) and yaml beside what every case loads; no other store's SDK.
      expect(beyond(packages, dependencyClosure([...ALWAYS, '@aws-sdk/client-s3', 'yaml']))).toEqual([]);
      expect(loadedAny(packages, 'yaml')).toEqual(['yaml']);
      expect(loadedAny(packages, '@aws-sdk/client-s3')).toEqual(['@aws-sdk/client-s3']);
      // Our Kubernetes client and the S3 store reach node:http through require too: no undici.
      expect(packages.builtins).toContain('https');
      expect(packages.builtins).not.toContain('internal/deps/undici/undici');
      expect(['@azure/', '@google-cloud/', 'ali-oss'].flatMap((sdk) => loadedAny(packages, sdk))).toEqual([]);
    });
  });
});

describe('etcdbrctl restore loads the online replay only when it replays online', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-restore-modules-'));
  });

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Restores the Go-written `gzip` chain with `--delta-replay=<mode>` and returns the modules the process loaded. */
  async function modulesLoadedBy(mode: 'auto' | 'online'): Promise<Set<string> & { packages: Set<string> }> {
    const log = join(dir, `${mode}.modules`);
    await writeFile(log, '');
    const args = [
      BIN,
      'restore',
      ...localStoreFlags(join(UPSTREAM_V023, 'gzip', 'snapstore'), join(dir, `${mode}-tmp`)),
      `--data-dir=${join(dir, `${mode}-data`)}`,
      `--restoration-temp-snapshots-dir=${join(dir, `${mode}-restore-tmp`)}`,
      `--delta-replay=${mode}`,
    ];
    const env = { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${HOOK}`, ETCDBRCTL_MODULE_LOG: log };
    await new Promise<void>((resolve, reject) =>
      execFile(process.execPath, args, { env }, (err, _stdout, stderr) =>
        err ? reject(new Error(`etcdbrctl restore --delta-replay=${mode} failed: ${stderr}`)) : resolve(),
      ),
    );
    const raw = await readFile(log, 'utf8');
    expect(ranBundled(raw)).toBe(true);
    const text = expandBundle(raw);
    return Object.assign(ownModulesOf(text), { packages: packagesOf(text) });
  }

  it('offline (auto on a chain it can write): no online replay, no etcd client, no node:http2', async () => {
    const modules = await modulesLoadedBy('auto');
    // The restore did run, and through the offline path.
    expect(modules).toContain('restorer/offline-replay.js');
    expect(modules).toContain('bbolt/writer.js');
    expect(ONLINE_ONLY.filter((m) => modules.has(m))).toEqual([]);
    expect(loadedAny(modules.packages, '@bufbuild/')).toEqual([]);
  });

  it('online: the same chain loads them', async () => {
    const modules = await modulesLoadedBy('online');
    expect(ONLINE_ONLY.filter((m) => !modules.has(m))).toEqual([]);
    expect(loadedAny(modules.packages, '@bufbuild/')).toEqual(['@bufbuild/protobuf']);
  });
});
