/**
 * The Kubernetes client, built only when a flag enables a Kubernetes feature (snapshot or member lease
 * renewal). Three ways to reach the API server: in-cluster service account files, a kubeconfig file, or an
 * explicit server URL (tests, debugging). Nothing here reads process.env: the CLI passes the environment in.
 * The client library itself is loaded by createKubeClient (library.ts), so importing this module costs nothing.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isIPv6 } from 'node:net';
import path from 'node:path';
import type { Cluster, Context, CoordinationV1Api, CustomObjectsApi, KubeConfig, User } from '@kubernetes/client-node';
import { KubeError } from './errors.js';
import { loadKubeLibrary, type KubeLibrary } from './library.js';

/** Where a pod's service account credentials are mounted. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

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

export interface KubeClient {
  readonly kubeConfig: KubeConfig;
  /** URL of the API server in use, for log lines. */
  readonly server: string;
  /** Namespace named by the configuration (in-cluster namespace file, kubeconfig context), if any. */
  readonly defaultNamespace: string | undefined;
  readonly coordination: CoordinationV1Api;
  readonly customObjects: CustomObjectsApi;
}

/** Builds a client. Fails with E_KUBE_CONFIG when files are missing or the configuration has no cluster. */
export async function createKubeClient(conn: KubeConnection): Promise<KubeClient> {
  const lib = await loadKubeLibrary();
  const kc = new lib.KubeConfig();
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
      kc.loadFromClusterAndUser(
        { name: 'in-cluster', server: `https://${host}:${conn.port}`, caFile, skipTLSVerify: false },
        { name: 'in-cluster', authProvider: { name: 'tokenFile', config: { tokenFile } } },
      );
      defaultNamespace = await readOptional(namespaceFile);
      break;
    }
    case 'kubeconfig': {
      if (conn.paths.length === 0) throw new KubeError('E_KUBE_CONFIG', 'no kubeconfig file given');
      loadKubeconfigs(lib, kc, conn.paths);
      if (conn.context !== undefined) {
        if (kc.getContextObject(conn.context) === null) {
          throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${conn.paths.join(':')} has no context "${conn.context}"`);
        }
        kc.setCurrentContext(conn.context);
      }
      defaultNamespace = kc.getContextObject(kc.getCurrentContext())?.namespace;
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
      const user: User = conn.token === undefined ? { name: 'user' } : { name: 'user', token: conn.token };
      kc.loadFromClusterAndUser(
        {
          name: 'cluster',
          server: conn.server.replace(/\/+$/, ''),
          ...(conn.caFile === undefined ? {} : { caFile: conn.caFile }),
          // client-node refuses http:// unless TLS verification is off; there is no TLS to verify then.
          skipTLSVerify: url.protocol === 'http:' || conn.insecureSkipTLSVerify === true,
        },
        user,
      );
      break;
    }
  }
  const cluster = kc.getCurrentCluster();
  if (cluster === null) {
    throw new KubeError('E_KUBE_CONFIG', `Kubernetes configuration has no cluster for context "${kc.getCurrentContext()}"`);
  }
  return {
    kubeConfig: kc,
    server: cluster.server,
    defaultNamespace,
    coordination: kc.makeApiClient(lib.CoordinationV1Api),
    customObjects: kc.makeApiClient(lib.CustomObjectsApi),
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

/** Loads each file and merges them: the first file that defines a name (or a current context) wins. */
function loadKubeconfigs(lib: KubeLibrary, kc: KubeConfig, paths: readonly string[]): void {
  const clusters: Cluster[] = [];
  const users: User[] = [];
  const contexts: Context[] = [];
  let currentContext = '';
  for (const file of paths) {
    const one = new lib.KubeConfig();
    try {
      one.loadFromFile(file);
    } catch (err) {
      throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${file} cannot be read: ${(err as Error).message}`, { cause: err });
    }
    for (const c of one.getClusters()) if (!clusters.some((x) => x.name === c.name)) clusters.push(withPlainHttpAllowed(c));
    for (const u of one.getUsers()) if (!users.some((x) => x.name === u.name)) users.push(u);
    for (const c of one.getContexts()) if (!contexts.some((x) => x.name === c.name)) contexts.push(c);
    if (currentContext === '' && one.getCurrentContext()) currentContext = one.getCurrentContext();
  }
  kc.loadFromOptions({ clusters, users, contexts, currentContext });
}

/**
 * client-node refuses an `http://` server unless `insecure-skip-tls-verify` is set, but kubeconfigs for plain
 * HTTP API servers (kind, local proxies, `kubectl proxy`) do not carry it, and client-go accepts them: with
 * no TLS there is nothing to verify. https servers keep exactly the verification their kubeconfig asks for.
 */
function withPlainHttpAllowed(cluster: Cluster): Cluster {
  // Through a proxy client-node accepts http:// as it is, and the flag would also stop it verifying an https proxy.
  if (!/^http:\/\//i.test(cluster.server) || cluster.skipTLSVerify || cluster.proxyUrl) return cluster;
  return { ...cluster, skipTLSVerify: true };
}

async function readOptional(file: string): Promise<string | undefined> {
  try {
    const text = (await readFile(file, 'utf8')).trim();
    return text === '' ? undefined : text;
  } catch {
    return undefined;
  }
}
