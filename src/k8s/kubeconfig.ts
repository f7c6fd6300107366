/**
 * kubeconfig files, read the way client-go's clientcmd does for what a sidecar needs: several files merged
 * first-wins (a KUBECONFIG list), a context naming a cluster (server, CA data or file, insecure-skip-tls-verify)
 * and a user (token, tokenFile, client certificate and key as data or files). Relative file names are relative to
 * the kubeconfig that names them. Everything else a user can hold (exec plugins, auth providers, basic auth) and
 * proxies are refused with an error naming the file and the user, never silently ignored. The yaml package loads
 * only when a kubeconfig is read.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { yaml } from '../encoding/yaml.js';
import { KubeError } from './errors.js';

export interface ResolvedCluster {
  server: string;
  ca?: Buffer;
  insecureSkipTLSVerify: boolean;
}

export interface ResolvedUser {
  token?: string;
  tokenFile?: string;
  cert?: Buffer;
  key?: Buffer;
}

export interface ResolvedKubeconfig {
  /** The files read, for messages. */
  files: readonly string[];
  context: string;
  namespace: string | undefined;
  cluster: ResolvedCluster;
  user: ResolvedUser;
}

type Obj = Record<string, unknown>;
interface Named {
  name: string;
  body: Obj;
  /** The file that defined it: relative paths inside resolve against its folder. */
  file: string;
}

/** Loads and merges `paths`, then resolves the current (or the given) context to a cluster and a user. */
export async function loadKubeconfig(paths: readonly string[], contextName?: string): Promise<ResolvedKubeconfig> {
  const { parse } = await yaml();
  const clusters = new Map<string, Named>();
  const users = new Map<string, Named>();
  const contexts = new Map<string, Named>();
  let current = '';
  for (const file of paths) {
    let doc: unknown;
    try {
      doc = parse(await readFile(file, 'utf8'));
    } catch (err) {
      throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${file} cannot be read: ${(err as Error).message}`, { cause: err });
    }
    if (doc === null || doc === undefined) continue;
    if (typeof doc !== 'object' || Array.isArray(doc)) throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${file} is not a mapping`);
    const d = doc as Obj;
    collect(d.clusters, 'cluster', file, clusters);
    collect(d.users, 'user', file, users);
    collect(d.contexts, 'context', file, contexts);
    if (current === '' && typeof d['current-context'] === 'string') current = d['current-context'];
  }
  const where = paths.join(path.delimiter);
  const name = contextName ?? current;
  if (contextName !== undefined && !contexts.has(contextName)) {
    throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${where} has no context "${contextName}"`);
  }
  const context = contexts.get(name);
  if (context === undefined) throw new KubeError('E_KUBE_CONFIG', `Kubernetes configuration has no cluster for context "${name}"`);
  const clusterName = str(context.body.cluster);
  const cluster = clusterName === undefined ? undefined : clusters.get(clusterName);
  if (cluster === undefined) throw new KubeError('E_KUBE_CONFIG', `Kubernetes configuration has no cluster for context "${name}"`);
  const userName = str(context.body.user);
  const user = userName === undefined || userName === '' ? undefined : users.get(userName);
  if (userName !== undefined && userName !== '' && user === undefined) {
    throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${where}: context "${name}" names user "${userName}", which no file defines`);
  }
  const namespace = str(context.body.namespace);
  return {
    files: paths,
    context: name,
    namespace: namespace === '' ? undefined : namespace,
    cluster: await resolveCluster(cluster),
    user: user === undefined ? {} : await resolveUser(user),
  };
}

function collect(list: unknown, key: string, file: string, into: Map<string, Named>): void {
  if (list === undefined || list === null) return;
  if (!Array.isArray(list)) throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${file}: ${key}s is not a list`);
  for (const entry of list as unknown[]) {
    const e = (entry ?? {}) as Obj;
    const name = str(e.name);
    if (name === undefined) throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${file}: a ${key} has no name`);
    const body = (e[key] ?? {}) as Obj;
    if (!into.has(name)) into.set(name, { name, body, file });
  }
}

async function resolveCluster(c: Named): Promise<ResolvedCluster> {
  const server = str(c.body.server);
  if (server === undefined || server === '')
    throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${c.file}: cluster "${c.name}" has no server`);
  const url = URL.canParse(server) ? new URL(server) : undefined;
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new KubeError(
      'E_KUBE_CONFIG',
      `kubeconfig ${c.file}: cluster "${c.name}" server ${JSON.stringify(server)} is not an http(s) URL`,
    );
  }
  if (str(c.body['proxy-url']) !== undefined) {
    throw new KubeError(
      'E_KUBE_CONFIG',
      `kubeconfig ${c.file}: cluster "${c.name}" uses proxy-url, which etcdbrctl does not support; reach the API server directly`,
    );
  }
  const ca = await dataOrFile(c, 'certificate-authority');
  return {
    server: server.replace(/\/+$/, ''),
    ...(ca === undefined ? {} : { ca }),
    insecureSkipTLSVerify: c.body['insecure-skip-tls-verify'] === true,
  };
}

/** What a user may hold that we cannot honour: refused, because silently sending no credentials would be worse. */
const UNSUPPORTED_USER_FIELDS = ['exec', 'auth-provider', 'username', 'password', 'as', 'as-groups', 'as-uid'] as const;

async function resolveUser(u: Named): Promise<ResolvedUser> {
  for (const field of UNSUPPORTED_USER_FIELDS) {
    if (u.body[field] !== undefined && u.body[field] !== null) {
      throw new KubeError(
        'E_KUBE_CONFIG',
        `kubeconfig ${u.file}: user "${u.name}" uses ${field}, which etcdbrctl does not support; ` +
          'give the user a token, a tokenFile or a client certificate and key',
      );
    }
  }
  const out: ResolvedUser = {};
  const token = str(u.body.token);
  if (token !== undefined && token !== '') out.token = token;
  const tokenFile = str(u.body.tokenFile);
  if (tokenFile !== undefined && tokenFile !== '' && out.token === undefined) out.tokenFile = path.resolve(path.dirname(u.file), tokenFile);
  const cert = await dataOrFile(u, 'client-certificate');
  const key = await dataOrFile(u, 'client-key');
  if ((cert === undefined) !== (key === undefined)) {
    throw new KubeError('E_KUBE_CONFIG', `kubeconfig ${u.file}: user "${u.name}" needs both a client certificate and a client key`);
  }
  if (cert !== undefined && key !== undefined) {
    out.cert = cert;
    out.key = key;
  }
  return out;
}

/** `<field>-data` (base64) wins over `<field>` (a file name), as in client-go. */
async function dataOrFile(n: Named, field: string): Promise<Buffer | undefined> {
  const data = str(n.body[`${field}-data`]);
  if (data !== undefined && data !== '') return Buffer.from(data, 'base64');
  const file = str(n.body[field]);
  if (file === undefined || file === '') return undefined;
  const full = path.resolve(path.dirname(n.file), file);
  try {
    return await readFile(full);
  } catch (err) {
    throw new KubeError(
      'E_KUBE_CONFIG',
      `kubeconfig ${n.file}: ${field} ${full} of "${n.name}" cannot be read: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}
