/**
 * The Kubernetes client, built only when a flag enables a Kubernetes feature (snapshot or member lease
 * renewal). Three ways to reach the API server: in-cluster service account files, a kubeconfig file, or an
 * explicit server URL (tests, debugging). Nothing here reads process.env: the CLI passes the environment in.
 * The REST transport is our own (http.ts): the sidecar makes five kinds of calls and needs none of a generated
 * client's weight; the yaml package loads only when a kubeconfig is read.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isIPv6 } from 'node:net';
import path from 'node:path';
import { packageVersion } from '../version.js';
import { KubeError } from './errors.js';
import type { RequestOptions, TransportOptions } from './http.js';

/** Where a pod's service account credentials are mounted. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * The `User-Agent` of every request: `etcdbrctl/<version>`, the program name and version upstream's client
 * starts its agent with (client-go names the binary), so audit logs and apiserver metrics tell the sidecar
 * apart from other clients (Node's HTTP client sends none).
 */
export function kubeUserAgent(): string {
  return `etcdbrctl/${packageVersion()}`;
}

export type KubeConnection =
  | {
      kind: 'in-cluster';
      /** KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT of the pod. */
      host: string;
      port: string;
      /** Defaults under SERVICE_ACCOUNT_DIR: `token`, `ca.crt`, `namespace`. */
      tokenFile?: string;
      caFile?: string;
      namespaceFile?: string;
    }
  | {
      kind: 'kubeconfig';
      /** One or more kubeconfig files, merged first-wins like client-go does for KUBECONFIG lists. */
      paths: readonly string[];
      /** Context to use instead of the file's current-context. */
      context?: string;
    }
  | {
      kind: 'server';
      /** e.g. `http://127.0.0.1:6443`; plain http implies skipping TLS verification. */
      server: string;
      token?: string;
      caFile?: string;
      insecureSkipTLSVerify?: boolean;
    };

/** A coordination.k8s.io/v1 Lease, as far as we read it. */
export interface Lease {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: { holderIdentity?: string | null; renewTime?: string | null; leaseDurationSeconds?: number | null };
}

export interface ObjectRef {
  namespace: string;
  name: string;
}

export interface CustomObjectRef extends ObjectRef {
  group: string;
  version: string;
  plural: string;
}

/** The Lease calls the sidecar makes (named like the Kubernetes API operations; test/deploy checks the Role grants them). */
export interface CoordinationApi {
  readNamespacedLease(ref: ObjectRef, options?: RequestOptions): Promise<Lease>;
  /** `options.contentType` picks the patch type (JSON merge patch for every caller today). */
  patchNamespacedLease(ref: ObjectRef & { body: object }, options: RequestOptions & { contentType: string }): Promise<Lease>;
}

/** Namespaced custom resources (the EtcdMember of druid.gardener.cloud) and their status subresource. */
export interface CustomObjectsApi {
  getNamespacedCustomObject(ref: CustomObjectRef, options?: RequestOptions): Promise<unknown>;
  patchNamespacedCustomObject(ref: CustomObjectRef & { body: object }, options: RequestOptions & { contentType: string }): Promise<unknown>;
  patchNamespacedCustomObjectStatus(
    ref: CustomObjectRef & { body: object },
    options: RequestOptions & { contentType: string },
  ): Promise<unknown>;
}

export interface KubeClient {
  /** URL of the API server in use, for log lines. */
  readonly server: string;
  /** Whether the API server's certificate is verified (false over plain http or with insecure-skip-tls-verify). */
  readonly verifiesTLS: boolean;
  /** Namespace named by the configuration (in-cluster namespace file, kubeconfig context), if any. */
  readonly defaultNamespace: string | undefined;
  readonly coordination: CoordinationApi;
  readonly customObjects: CustomObjectsApi;
  /** Closes idle keep-alive connections. */
  close(): void;
}

/** Builds a client. Fails with E_KUBE_CONFIG when files are missing or the configuration has no cluster. */
export async function createKubeClient(conn: KubeConnection): Promise<KubeClient> {
  let transport: TransportOptions;
  let defaultNamespace: string | undefined;
  switch (conn.kind) {
    case 'in-cluster': {
      const tokenFile = conn.tokenFile ?? path.join(SERVICE_ACCOUNT_DIR, 'token');
      const caFile = conn.caFile ?? path.join(SERVICE_ACCOUNT_DIR, 'ca.crt');
      const namespaceFile = conn.namespaceFile ?? path.join(SERVICE_ACCOUNT_DIR, 'namespace');
      if (conn.host === '' || conn.port === '') {
        throw new KubeError(
          'E_KUBE_CONFIG',
          'in-cluster Kubernetes configuration needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT',
        );
      }
      for (const [what, file] of [
        ['token', tokenFile],
        ['CA certificate', caFile],
      ] as const) {
        if (!existsSync(file)) {
          throw new KubeError('E_KUBE_CONFIG', `in-cluster Kubernetes configuration: service account ${what} ${file} does not exist`);
        }
      }
      const host = isIPv6(conn.host) ? `[${conn.host}]` : conn.host;
      // Like client-go's InClusterConfig: always https; the token is re-read from the file (bound tokens rotate).
      transport = { server: `https://${host}:${conn.port}`, ca: await readFile(caFile), tokenFile };
      defaultNamespace = await readOptional(namespaceFile);
      break;
    }
    case 'kubeconfig': {
      if (conn.paths.length === 0) throw new KubeError('E_KUBE_CONFIG', 'no kubeconfig file given');
      const { loadKubeconfig } = await import('./kubeconfig.js');
      const kc = await loadKubeconfig(conn.paths, conn.context);
      transport = {
        server: kc.cluster.server,
        ...(kc.cluster.ca === undefined ? {} : { ca: kc.cluster.ca }),
        insecureSkipTLSVerify: kc.cluster.insecureSkipTLSVerify,
        ...kc.user,
      };
      defaultNamespace = kc.namespace;
      break;
    }
    case 'server': {
      let url: URL;
      try {
        url = new URL(conn.server);
      } catch (err) {
        throw new KubeError('E_KUBE_CONFIG', `Kubernetes API server URL ${JSON.stringify(conn.server)} is not a URL`, { cause: err });
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:') {
        throw new KubeError('E_KUBE_CONFIG', `Kubernetes API server URL ${conn.server} must use http or https`);
      }
      transport = {
        server: conn.server,
        ...(conn.token === undefined ? {} : { token: conn.token }),
        ...(conn.caFile === undefined ? {} : { ca: await readFile(conn.caFile) }),
        insecureSkipTLSVerify: conn.insecureSkipTLSVerify === true,
      };
      break;
    }
  }
  // Loaded here, not at import: the CLI imports this module for resolveKubeConnection with Kubernetes off too.
  const { KubeTransport } = await import('./http.js');
  const t = new KubeTransport({ ...transport, userAgent: kubeUserAgent() });
  const enc = encodeURIComponent;
  const leasePath = (r: ObjectRef): string => `/apis/coordination.k8s.io/v1/namespaces/${enc(r.namespace)}/leases/${enc(r.name)}`;
  const customPath = (r: CustomObjectRef): string =>
    `/apis/${enc(r.group)}/${enc(r.version)}/namespaces/${enc(r.namespace)}/${enc(r.plural)}/${enc(r.name)}`;
  return {
    server: t.server,
    verifiesTLS: t.verifiesTLS,
    defaultNamespace,
    coordination: {
      readNamespacedLease: async (ref, options) => (await t.request('GET', leasePath(ref), undefined, options)) as Lease,
      patchNamespacedLease: async (ref, options) => (await t.request('PATCH', leasePath(ref), ref.body, options)) as Lease,
    },
    customObjects: {
      getNamespacedCustomObject: (ref, options) => t.request('GET', customPath(ref), undefined, options),
      patchNamespacedCustomObject: (ref, options) => t.request('PATCH', customPath(ref), ref.body, options),
      patchNamespacedCustomObjectStatus: (ref, options) => t.request('PATCH', `${customPath(ref)}/status`, ref.body, options),
    },
    close: () => t.close(),
  };
}

export interface ResolveKubeConnectionInput {
  /** An explicit kubeconfig path (flag), which wins over everything else. */
  kubeconfig?: string;
  /** The process environment, passed in by the CLI. */
  env: Readonly<Record<string, string | undefined>>;
  /** Injected so tests can describe a file system; defaults to fs.existsSync. */
  exists?: (file: string) => boolean;
}

/**
 * Where to find the API server, in controller-runtime's order (upstream uses its `config.GetConfig`):
 * explicit kubeconfig, `KUBECONFIG`, in-cluster (service host/port set and a token mounted), `~/.kube/config`.
 */
export function resolveKubeConnection(input: ResolveKubeConnectionInput): KubeConnection {
  const exists = input.exists ?? existsSync;
  const { env } = input;
  if (input.kubeconfig !== undefined && input.kubeconfig !== '') {
    if (!exists(input.kubeconfig)) throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${input.kubeconfig} does not exist`);
    return { kind: 'kubeconfig', paths: [input.kubeconfig] };
  }
  const listed = (env.KUBECONFIG ?? '').split(path.delimiter).filter((p) => p !== '');
  if (listed.length > 0) {
    // client-go skips list entries that do not exist, but an all-missing list is an error.
    const present = listed.filter((p) => exists(p));
    if (present.length === 0) throw new KubeError('E_KUBE_CONFIG', `none of the KUBECONFIG files exist: ${listed.join(path.delimiter)}`);
    return { kind: 'kubeconfig', paths: present };
  }
  const host = env.KUBERNETES_SERVICE_HOST ?? '';
  const port = env.KUBERNETES_SERVICE_PORT ?? '';
  if (host !== '' && port !== '' && exists(path.join(SERVICE_ACCOUNT_DIR, 'token'))) {
    return { kind: 'in-cluster', host, port };
  }
  const home = env.HOME ?? env.USERPROFILE;
  if (home !== undefined && home !== '') {
    const file = path.join(home, '.kube', 'config');
    if (exists(file)) return { kind: 'kubeconfig', paths: [file] };
  }
  throw new KubeError(
    'E_KUBE_CONFIG',
    'no Kubernetes configuration found: not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset or no service account token), ' +
      'no KUBECONFIG and no ~/.kube/config; Kubernetes features (lease renewal) need one of them',
  );
}

async function readOptional(file: string): Promise<string | undefined> {
  try {
    const text = (await readFile(file, 'utf8')).trim();
    return text === '' ? undefined : text;
  } catch {
    return undefined;
  }
}
