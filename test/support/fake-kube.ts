/**
 * A small fake Kubernetes API server over real HTTP(S), for the resources etcdbrctl touches: Leases
 * (coordination.k8s.io/v1) and etcd-druid custom resources (EtcdMember, Etcd). No kube-apiserver exists on
 * these machines, so this follows the documented REST semantics instead:
 *
 * - GET item / list, POST create (201, 409 AlreadyExists), PUT, PATCH, DELETE; missing objects ⇒ 404 NotFound
 *   with a `Status` body, as the apiserver writes it.
 * - PATCH: `application/merge-patch+json` (RFC 7386), `application/json-patch+json` (RFC 6902) and
 *   `application/strategic-merge-patch+json` for built-in types (treated as a merge patch: the Lease fields have
 *   no list merge keys). Custom resources reject strategic merge with 415, as the apiserver does.
 * - Optimistic locking: every write bumps one global resourceVersion counter (like etcd's revision); a PUT or a
 *   patched object carrying `metadata.resourceVersion` that is not current ⇒ 409 Conflict. A write that changes
 *   nothing is not a write: the object and its resourceVersion stay as they are (apiserver behaviour).
 * - Server-owned metadata (uid, creationTimestamp, generation) survives PUT and PATCH.
 * - `status` subresource for custom resources: writes to the main resource keep the old status; writes to
 *   `/status` change nothing but the status. `metadata.generation` counts spec changes of custom resources.
 * - Lease fields are type-checked the way the apiserver decodes them: MicroTime must be RFC 3339 with exactly
 *   six fractional digits, numbers must be integers, annotations must be strings ⇒ 400 BadRequest otherwise.
 *
 * - RBAC (option `rbac`): authorization comes after authentication and before routing, as in kube-apiserver, so
 *   a request the Roles do not allow answers 403 Forbidden (a `Status` with reason Forbidden and the
 *   authorizer's message) even for a resource the server does not serve; discovery is open to everyone (the
 *   `system:discovery` binding). Resource types can be left out (`omit`: e.g. no EtcdMember CRD installed),
 *   which answers 404 "the server could not find the requested resource" with empty details.
 *
 * Tests seed and read objects directly, inject failures (next N matching requests answer with an error
 * status, or stall), and run a "concurrent writer" just before a matching request to force a 409.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { isDeepStrictEqual } from 'node:util';

export interface ResourceType {
  /** API group; '' for the core group (`/api/v1`). */
  group: string;
  version: string;
  /** Lower-case plural used in URLs, e.g. `leases`. */
  plural: string;
  kind: string;
  namespaced: boolean;
  /** Custom resources: status subresource, generation tracking, no strategic merge patch. */
  custom: boolean;
  /** Whether `/status` is served (only meaningful together with `custom`). */
  statusSubresource: boolean;
}

export const LEASES: ResourceType = {
  group: 'coordination.k8s.io',
  version: 'v1',
  plural: 'leases',
  kind: 'Lease',
  namespaced: true,
  custom: false,
  statusSubresource: false,
};

export const ETCD_MEMBERS: ResourceType = {
  group: 'druid.gardener.cloud',
  version: 'v1alpha1',
  plural: 'etcdmembers',
  kind: 'EtcdMember',
  namespaced: true,
  custom: true,
  statusSubresource: true,
};

export const ETCDS: ResourceType = {
  group: 'druid.gardener.cloud',
  version: 'v1alpha1',
  plural: 'etcds',
  kind: 'Etcd',
  namespaced: true,
  custom: true,
  statusSubresource: true,
};

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** A stored object as the API serves it. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: JsonObject & { name: string; namespace?: string; resourceVersion: string };
  [key: string]: Json;
}

/** What a test passes to `seed`: any object with at least a name. */
export interface SeedObject {
  metadata: { name: string; namespace?: string; [key: string]: Json | undefined };
  [key: string]: Json | object | undefined;
}

export interface RecordedRequest {
  method: string;
  /** Path without the query string. */
  path: string;
  query: URLSearchParams;
  contentType: string | undefined;
  authorization: string | undefined;
  userAgent: string | undefined;
  /** Parsed JSON body, or undefined when there was none. */
  body: unknown;
  /** Status code the fake answered with (undefined while the request is stalled). */
  status?: number;
}

/** Which requests a failure or hook applies to. Omitted fields match everything. */
export interface RequestMatch {
  method?: string;
  /** Exact path, or a pattern tested against the path. */
  path?: string | RegExp;
}

export interface InjectedFailure {
  status: number;
  reason?: string;
  message?: string;
}

/** An rbac.authorization.k8s.io/v1 PolicyRule (resource rules only). */
export interface PolicyRule {
  apiGroups: readonly string[];
  resources: readonly string[];
  verbs: readonly string[];
  resourceNames?: readonly string[];
}

/** Who the requests come from and the Roles bound to them (RoleBindings are implied). */
export interface FakeRbac {
  /** The authenticated user, e.g. `system:serviceaccount:<namespace>:<name>`. */
  user: string;
  roles: ReadonlyArray<{ namespace: string; rules: readonly PolicyRule[] }>;
}

/** The RBAC attributes of a request, as kube-apiserver's RequestInfoFactory derives them from method and path. */
export interface RequestAttributes {
  /** false for discovery and other non-resource paths. */
  resourceRequest: boolean;
  verb: string;
  apiGroup: string;
  apiVersion: string;
  resource: string;
  subresource: string;
  namespace: string;
  name: string;
}

export interface FakeKubeOptions {
  /** When set, every request needs `Authorization: Bearer <token>`, else 401. */
  token?: string;
  /** Serve HTTPS with this certificate instead of plain HTTP. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** Resource types served in addition to Leases, EtcdMembers and Etcds. */
  resources?: readonly ResourceType[];
  /** Resource types not served (a CRD that is not installed). */
  omit?: readonly ResourceType[];
  /** Enforce these Roles (see the file comment); without it every request is allowed. */
  rbac?: FakeRbac;
}

interface FailureRule {
  match: RequestMatch;
  remaining: number;
  failure: InjectedFailure;
}

interface HookRule {
  match: RequestMatch;
  action: () => void;
}

interface StallRule {
  match: RequestMatch;
  remaining: number;
}

interface ParsedPath {
  type: ResourceType;
  namespace: string | undefined;
  name: string | undefined;
  subresource: string | undefined;
}

/** An error answered as a `Status` object. */
class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: JsonObject,
  ) {
    super(message);
  }
}

const REASONS: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'Conflict',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

/** metav1.MicroTime is decoded with layout RFC3339Micro: exactly six fractional digits. */
const MICRO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$/;

export class FakeKubeApiServer {
  readonly requests: RecordedRequest[] = [];
  private types: ResourceType[];
  private rbac: FakeRbac | undefined;
  private readonly objects = new Map<string, KubeObject>();
  private revision = 0;
  private failures: FailureRule[] = [];
  private hooks: HookRule[] = [];
  private stalls: StallRule[] = [];
  private readonly stalled = new Set<http.ServerResponse>();

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    private readonly opts: FakeKubeOptions,
  ) {
    this.types = this.servedTypes();
    this.rbac = opts.rbac;
  }

  private servedTypes(): ResourceType[] {
    return [LEASES, ETCD_MEMBERS, ETCDS, ...(this.opts.resources ?? [])].filter((t) => !(this.opts.omit ?? []).includes(t));
  }

  /** Listens on 127.0.0.1, port 0. */
  static async start(opts: FakeKubeOptions = {}): Promise<FakeKubeApiServer> {
    let fake: FakeKubeApiServer | undefined;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
      (fake as FakeKubeApiServer).handle(req, res);
    };
    const server = opts.tls ? https.createServer({ cert: opts.tls.cert, key: opts.tls.key }, handler) : http.createServer(handler);
    // An idle connection stays open 90 s, as kube-apiserver keeps it (IdleTimeout in k8s.io/apiserver's
    // pkg/server/secure_serving.go), not Node's 5 s: a client heartbeating every 10 s reuses its connection
    // there, and the idle-CPU bench would otherwise pay a new connection (over TLS, a handshake) per beat.
    server.keepAliveTimeout = 90_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    fake = new FakeKubeApiServer(server, `${opts.tls ? 'https' : 'http'}://127.0.0.1:${port}`, opts);
    return fake;
  }

  /** Closes the listener and every open connection, stalled requests included. */
  async stop(): Promise<void> {
    for (const res of this.stalled) res.destroy();
    this.stalled.clear();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  /**
   * A kubeconfig (JSON, which is valid YAML) pointing at this server, as users write one: over TLS with the
   * server's CA, over plain HTTP with nothing but the server URL. `insecureSkipTlsVerify` adds
   * `insecure-skip-tls-verify: true` (and, over TLS, leaves the CA out), the other form users write.
   */
  kubeconfig(opts: { token?: string; namespace?: string; insecureSkipTlsVerify?: boolean } = {}): string {
    const cluster: Record<string, string | boolean> = { server: this.url };
    if (opts.insecureSkipTlsVerify) cluster['insecure-skip-tls-verify'] = true;
    else if (this.opts.tls) cluster['certificate-authority-data'] = Buffer.from(this.opts.tls.cert).toString('base64');
    const user: Record<string, string> = {};
    const token = opts.token ?? this.opts.token;
    if (token !== undefined) user.token = token;
    const context: Record<string, string> = { cluster: 'fake', user: 'fake' };
    if (opts.namespace !== undefined) context.namespace = opts.namespace;
    return JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster }],
      users: [{ name: 'fake', user }],
      contexts: [{ name: 'fake', context }],
      'current-context': 'fake',
    });
  }

  // -------------------------------------------------------------------------------------------------
  // Test-side access (no HTTP)

  /** Creates or replaces an object as an administrator would; returns the stored copy. */
  seed(type: ResourceType, obj: SeedObject): KubeObject {
    const input = clone(obj as unknown as JsonObject);
    const meta = (input.metadata ?? {}) as JsonObject;
    const name = meta.name;
    if (typeof name !== 'string' || name === '') throw new Error('fake-kube seed: metadata.name is required');
    const namespace = type.namespaced ? String(meta.namespace ?? 'default') : undefined;
    const key = this.key(type, namespace, name);
    const old = this.objects.get(key);
    const stored = this.normalize(type, input, namespace, name);
    const now = new Date();
    stored.metadata.uid = old?.metadata.uid ?? (typeof meta.uid === 'string' ? meta.uid : randomUUID());
    stored.metadata.creationTimestamp = old?.metadata.creationTimestamp ?? rfc3339(now);
    if (type.custom) stored.metadata.generation = old ? Number(old.metadata.generation ?? 1) + 1 : 1;
    stored.metadata.resourceVersion = this.nextRevision();
    this.objects.set(key, stored);
    return clone(stored);
  }

  /** A copy of the stored object, or undefined. */
  read(type: ResourceType, namespace: string | undefined, name: string): KubeObject | undefined {
    const obj = this.objects.get(this.key(type, namespace, name));
    return obj === undefined ? undefined : clone(obj);
  }

  /**
   * A write by another client (druid, kubectl): `mutate` edits a copy, which is stored with a new
   * resourceVersion. Clients holding the old resourceVersion then get 409 on optimistic writes.
   */
  write(type: ResourceType, namespace: string | undefined, name: string, mutate: (obj: KubeObject) => void = () => {}): KubeObject {
    const key = this.key(type, namespace, name);
    const old = this.objects.get(key);
    if (old === undefined) throw new Error(`fake-kube write: ${type.plural} ${namespace ?? ''}/${name} does not exist`);
    const next = clone(old);
    mutate(next);
    next.metadata.resourceVersion = this.nextRevision();
    this.objects.set(key, next);
    return clone(next);
  }

  remove(type: ResourceType, namespace: string | undefined, name: string): boolean {
    return this.objects.delete(this.key(type, namespace, name));
  }

  /** The next `count` requests matching `match` are answered with `failure` instead of being served. */
  failNext(count: number, failure: InjectedFailure, match: RequestMatch = {}): void {
    this.failures.push({ match, remaining: count, failure });
  }

  /** Runs `action` (e.g. `write(...)`) once, just before serving the next request matching `match`. */
  beforeNext(match: RequestMatch, action: () => void): void {
    this.hooks.push({ match, action });
  }

  /** The next `count` matching requests are never answered (until `stop`): for client timeouts. */
  stallNext(count: number, match: RequestMatch = {}): void {
    this.stalls.push({ match, remaining: count });
  }

  /** Forgets injected failures, hooks and stalls not used up yet, and the request log (between tests). */
  resetInjections(): void {
    this.failures = [];
    this.hooks = [];
    this.stalls = [];
    this.requests.length = 0;
  }

  /** Enforces other Roles from now on (undefined: allow everything); `reset` goes back to the options'. */
  setRbac(rbac: FakeRbac | undefined): void {
    this.rbac = rbac;
  }

  /** Serves a resource type or stops serving it (a CRD installed or removed); `reset` goes back to the options'. */
  setServed(type: ResourceType, served: boolean): void {
    this.types = this.types.filter((t) => t !== type);
    if (served) this.types.push(type);
  }

  /** Forgets every object as well as the injections and the request log: an empty server again. */
  reset(): void {
    this.objects.clear();
    this.resetInjections();
    this.types = this.servedTypes();
    this.rbac = this.opts.rbac;
  }

  /** Requests received so far that match. */
  requestsMatching(match: RequestMatch): RecordedRequest[] {
    return this.requests.filter((r) => matches(match, r.method, r.path));
  }

  // -------------------------------------------------------------------------------------------------
  // HTTP

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const raw = Buffer.concat(chunks).toString('utf8');
      const record: RecordedRequest = {
        method: req.method ?? 'GET',
        path: url.pathname,
        query: url.searchParams,
        contentType: req.headers['content-type']?.split(';')[0]?.trim(),
        authorization: req.headers.authorization,
        userAgent: req.headers['user-agent'],
        body: undefined,
      };
      this.requests.push(record);
      const answer = (status: number, body: unknown): void => {
        record.status = status;
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      try {
        if (raw !== '') {
          try {
            record.body = JSON.parse(raw);
          } catch {
            throw new ApiError(400, 'BadRequest', `the body of the request could not be decoded as JSON: ${raw.slice(0, 80)}`);
          }
        }
        if (this.opts.token !== undefined && req.headers.authorization !== `Bearer ${this.opts.token}`) {
          throw new ApiError(401, 'Unauthorized', 'Unauthorized');
        }
        if (this.rbac) authorize(this.rbac, requestAttributes(record.method, record.path, record.query));
        const stall = this.stalls.find((s) => s.remaining > 0 && matches(s.match, record.method, record.path));
        if (stall) {
          stall.remaining--;
          this.stalled.add(res);
          res.on('close', () => this.stalled.delete(res));
          return;
        }
        const failure = this.failures.find((f) => f.remaining > 0 && matches(f.match, record.method, record.path));
        if (failure) {
          failure.remaining--;
          const { status, reason, message } = failure.failure;
          throw new ApiError(status, reason ?? REASONS[status] ?? 'Unknown', message ?? `injected failure (${status})`);
        }
        const hookIndex = this.hooks.findIndex((h) => matches(h.match, record.method, record.path));
        if (hookIndex >= 0) {
          const [hook] = this.hooks.splice(hookIndex, 1);
          hook?.action();
        }
        const [status, body] = this.serve(record, url.pathname);
        answer(status, body);
      } catch (err) {
        if (err instanceof ApiError) answer(err.code, statusBody(err));
        else answer(500, statusBody(new ApiError(500, 'InternalError', String(err))));
      }
    });
  }

  private serve(req: RecordedRequest, path: string): [number, unknown] {
    const segments = path
      .split('/')
      .filter((s) => s !== '')
      .map(decodeURIComponent);
    const discovery = this.discovery(req.method, segments);
    if (discovery !== undefined) return [200, discovery];
    const parsed = this.parsePath(segments);
    const { type, namespace, name, subresource } = parsed;
    if (subresource !== undefined && !(subresource === 'status' && type.custom && type.statusSubresource)) {
      throw notFoundPath();
    }
    if (name === undefined) {
      if (req.method === 'GET') return [200, this.list(type, namespace)];
      if (req.method === 'POST') return [201, this.create(type, namespace, req.body)];
      throw new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`);
    }
    switch (req.method) {
      case 'GET':
        return [200, clone(this.mustGet(type, namespace, name))];
      case 'PUT':
        return [200, this.update(parsed, name, req.body)];
      case 'PATCH':
        return [200, this.patch(parsed, name, req.contentType, req.body)];
      case 'DELETE': {
        if (subresource !== undefined)
          throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        const old = this.mustGet(type, namespace, name);
        this.objects.delete(this.key(type, namespace, name));
        // Custom resources answer with the deleted object; most built-ins (Lease included) with a Status.
        if (type.custom) return [200, clone(old)];
        return [
          200,
          {
            kind: 'Status',
            apiVersion: 'v1',
            metadata: {},
            status: 'Success',
            details: { name, group: type.group, kind: type.plural, uid: old.metadata.uid ?? '' },
          },
        ];
      }
      default:
        throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    }
  }

  /** `/apis/{group}/{version}` answers the APIResourceList (what generic clients look up). */
  private discovery(method: string, segments: string[]): unknown {
    if (method !== 'GET') return undefined;
    let group: string;
    let version: string;
    if (segments.length === 2 && segments[0] === 'api') [group, version] = ['', segments[1] as string];
    else if (segments.length === 3 && segments[0] === 'apis') [group, version] = [segments[1] as string, segments[2] as string];
    else return undefined;
    const types = this.types.filter((t) => t.group === group && t.version === version);
    if (types.length === 0) throw notFoundPath();
    const resources: JsonObject[] = [];
    for (const t of types) {
      const verbs = ['create', 'delete', 'get', 'list', 'patch', 'update'];
      resources.push({ name: t.plural, singularName: t.kind.toLowerCase(), namespaced: t.namespaced, kind: t.kind, verbs });
      if (t.custom && t.statusSubresource) {
        resources.push({
          name: `${t.plural}/status`,
          singularName: '',
          namespaced: t.namespaced,
          kind: t.kind,
          verbs: ['get', 'patch', 'update'],
        });
      }
    }
    return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group === '' ? version : `${group}/${version}`, resources };
  }

  private parsePath(segments: string[]): ParsedPath {
    let group: string;
    let version: string;
    let rest: string[];
    if (segments[0] === 'api' && segments.length >= 2) {
      group = '';
      version = segments[1] as string;
      rest = segments.slice(2);
    } else if (segments[0] === 'apis' && segments.length >= 3) {
      group = segments[1] as string;
      version = segments[2] as string;
      rest = segments.slice(3);
    } else {
      throw notFoundPath();
    }
    let namespace: string | undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      namespace = rest[1];
      rest = rest.slice(2);
    }
    const [plural, name, subresource, ...extra] = rest;
    const type = this.types.find((t) => t.group === group && t.version === version && t.plural === plural);
    if (type === undefined || extra.length > 0 || type.namespaced !== (namespace !== undefined)) throw notFoundPath();
    return { type, namespace, name, subresource };
  }

  private list(type: ResourceType, namespace: string | undefined): unknown {
    const items = [...this.objects.values()]
      .filter((o) => o.apiVersion === apiVersionOf(type) && o.kind === type.kind)
      .filter((o) => namespace === undefined || o.metadata.namespace === namespace)
      .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
      .map((o) => clone(o));
    return { apiVersion: apiVersionOf(type), kind: `${type.kind}List`, metadata: { resourceVersion: String(this.revision) }, items };
  }

  private create(type: ResourceType, namespace: string | undefined, body: unknown): KubeObject {
    const input = this.checkBody(type, body);
    const meta = (input.metadata ?? {}) as JsonObject;
    const name = meta.name;
    if (typeof name !== 'string' || name === '') {
      throw invalid(type, '', 'metadata.name: Required value: name or generateName is required');
    }
    if (meta.namespace !== undefined && meta.namespace !== namespace) {
      throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
    }
    const key = this.key(type, namespace, name);
    if (this.objects.has(key)) {
      throw new ApiError(409, 'AlreadyExists', `${resourceName(type)} "${name}" already exists`, details(type, name));
    }
    const stored = this.normalize(type, input, namespace, name);
    stored.metadata.uid = randomUUID();
    stored.metadata.creationTimestamp = rfc3339(new Date());
    if (type.custom) stored.metadata.generation = 1;
    // Status is not settable on create when the status subresource exists.
    if (type.custom && type.statusSubresource) delete stored.status;
    stored.metadata.resourceVersion = this.nextRevision();
    this.objects.set(key, stored);
    return clone(stored);
  }

  private update(path: ParsedPath, name: string, body: unknown): KubeObject {
    const { type, namespace } = path;
    const input = this.checkBody(type, body);
    const meta = (input.metadata ?? {}) as JsonObject;
    if (meta.name !== undefined && meta.name !== name) {
      throw new ApiError(400, 'BadRequest', `the name of the object (${String(meta.name)}) does not match the name on the URL (${name})`);
    }
    if (meta.namespace !== undefined && meta.namespace !== namespace) {
      throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
    }
    const old = this.mustGet(type, namespace, name);
    return this.commit(path, name, old, input);
  }

  private patch(path: ParsedPath, name: string, contentType: string | undefined, body: unknown): KubeObject {
    const { type, namespace } = path;
    const old = this.mustGet(type, namespace, name);
    let patched: Json;
    switch (contentType) {
      case 'application/merge-patch+json':
        patched = mergePatch(clone(old) as Json, body as Json);
        break;
      case 'application/strategic-merge-patch+json':
        if (type.custom) throw unsupportedPatch(contentType, true);
        // Lease (and the metadata we touch) has no list fields with merge keys: same result as a merge patch.
        patched = mergePatch(clone(old) as Json, body as Json);
        break;
      case 'application/json-patch+json':
        if (!Array.isArray(body)) {
          throw new ApiError(400, 'BadRequest', 'json: cannot unmarshal object into Go value of type jsonpatch.Patch');
        }
        try {
          patched = jsonPatch(clone(old) as Json, body);
        } catch (err) {
          throw invalid(type, name, `patch: Invalid value: ${(err as Error).message}`);
        }
        break;
      default:
        throw unsupportedPatch(contentType, type.custom);
    }
    if (!isObject(patched)) throw new ApiError(400, 'BadRequest', 'the patched object is not a JSON object');
    const meta = (patched.metadata ?? {}) as JsonObject;
    if (meta.name !== name) {
      throw new ApiError(400, 'BadRequest', `the name of the object (${String(meta.name)}) does not match the name on the URL (${name})`);
    }
    if (type.namespaced && meta.namespace !== namespace) {
      throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
    }
    return this.commit(path, name, old, this.checkBody(type, patched));
  }

  /** The common tail of PUT and PATCH: precondition, subresource rules, no-op detection, store. */
  private commit(path: ParsedPath, name: string, old: KubeObject, input: JsonObject): KubeObject {
    const { type, namespace, subresource } = path;
    const rv = ((input.metadata ?? {}) as JsonObject).resourceVersion;
    if (rv !== undefined && rv !== null && rv !== '' && rv !== old.metadata.resourceVersion) {
      throw new ApiError(
        409,
        'Conflict',
        `Operation cannot be fulfilled on ${resourceName(type)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        details(type, name),
      );
    }
    let next = this.normalize(type, input, namespace, name);
    if (type.custom && type.statusSubresource) {
      if (subresource === 'status') {
        const status = next.status;
        next = clone(old);
        if (status === undefined) delete next.status;
        else next.status = status;
      } else if (old.status === undefined) {
        delete next.status;
      } else {
        next.status = clone(old.status);
      }
    }
    // Server-owned metadata cannot be changed by clients.
    next.metadata.uid = old.metadata.uid ?? randomUUID();
    next.metadata.creationTimestamp = old.metadata.creationTimestamp ?? rfc3339(new Date());
    if (type.custom) {
      next.metadata.generation = Number(old.metadata.generation ?? 1) + (specChanged(old, next) ? 1 : 0);
    } else if (old.metadata.generation !== undefined) {
      next.metadata.generation = old.metadata.generation;
    }
    next.metadata.resourceVersion = old.metadata.resourceVersion;
    if (isDeepStrictEqual(next, old)) return clone(old);
    next.metadata.resourceVersion = this.nextRevision();
    this.objects.set(this.key(type, namespace, name), next);
    return clone(next);
  }

  /** Type checks done by the apiserver's decoder, and apiVersion/kind consistency. */
  private checkBody(type: ResourceType, body: unknown): JsonObject {
    if (!isObject(body)) throw new ApiError(400, 'BadRequest', 'the body of the request must be a JSON object');
    if (body.apiVersion !== undefined && body.apiVersion !== apiVersionOf(type)) {
      throw new ApiError(
        400,
        'BadRequest',
        `the API version in the data (${String(body.apiVersion)}) does not match the expected API version (${apiVersionOf(type)})`,
      );
    }
    if (body.kind !== undefined && body.kind !== type.kind) {
      throw new ApiError(400, 'BadRequest', `the kind in the data (${String(body.kind)}) does not match the expected kind (${type.kind})`);
    }
    const meta = body.metadata;
    if (meta !== undefined && meta !== null) {
      if (!isObject(meta)) throw decodeError(type, 'metadata', 'object');
      for (const field of ['annotations', 'labels'] as const) {
        const map = meta[field];
        if (map === undefined || map === null) continue;
        if (!isObject(map)) throw decodeError(type, `metadata.${field}`, 'map[string]string');
        for (const [k, v] of Object.entries(map)) {
          if (typeof v !== 'string') throw decodeError(type, `metadata.${field}.${k}`, 'string');
        }
      }
    }
    if (type === LEASES && body.spec !== undefined && body.spec !== null) {
      const spec = body.spec;
      if (!isObject(spec)) throw decodeError(type, 'spec', 'LeaseSpec');
      for (const f of ['holderIdentity', 'preferredHolder', 'strategy'] as const) {
        if (spec[f] !== undefined && spec[f] !== null && typeof spec[f] !== 'string') throw decodeError(type, `spec.${f}`, 'string');
      }
      for (const f of ['leaseDurationSeconds', 'leaseTransitions'] as const) {
        const v = spec[f];
        if (v !== undefined && v !== null && !(typeof v === 'number' && Number.isInteger(v))) throw decodeError(type, `spec.${f}`, 'int32');
      }
      for (const f of ['acquireTime', 'renewTime'] as const) {
        const v = spec[f];
        if (v === undefined || v === null) continue;
        if (typeof v !== 'string' || !MICRO_TIME.test(v) || Number.isNaN(Date.parse(v))) {
          throw new ApiError(
            400,
            'BadRequest',
            `parsing time ${JSON.stringify(v)} as "2006-01-02T15:04:05.000000Z07:00": cannot parse (spec.${f})`,
          );
        }
      }
    }
    return body;
  }

  /** apiVersion/kind/name/namespace set from the URL; nulls dropped the way a typed decode drops them. */
  private normalize(type: ResourceType, input: JsonObject, namespace: string | undefined, name: string): KubeObject {
    const obj = dropNulls(clone(input)) as JsonObject;
    const meta = isObject(obj.metadata) ? obj.metadata : {};
    meta.name = name;
    if (namespace !== undefined) meta.namespace = namespace;
    else delete meta.namespace;
    return { ...obj, apiVersion: apiVersionOf(type), kind: type.kind, metadata: meta as KubeObject['metadata'] };
  }

  private mustGet(type: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const obj = this.objects.get(this.key(type, namespace, name));
    if (obj === undefined) throw new ApiError(404, 'NotFound', `${resourceName(type)} "${name}" not found`, details(type, name));
    return obj;
  }

  private key(type: ResourceType, namespace: string | undefined, name: string): string {
    return `${type.group}/${type.plural}/${namespace ?? ''}/${name}`;
  }

  private nextRevision(): string {
    this.revision++;
    return String(this.revision);
  }
}

// ---------------------------------------------------------------------------------------------------
// RBAC

/**
 * The request attributes kube-apiserver authorizes (k8s.io/apiserver's RequestInfoFactory): `/api/v1/...` is the
 * core group, `/apis/<group>/<version>/...` the others; `namespaces/<ns>/` scopes the rest; then resource,
 * name, subresource. Anything shorter (`/apis/<group>/<version>`) is a non-resource (discovery) request.
 */
export function requestAttributes(method: string, path: string, query: URLSearchParams): RequestAttributes {
  const parts = path
    .split('/')
    .filter((x) => x !== '')
    .map(decodeURIComponent);
  const attrs: RequestAttributes = {
    resourceRequest: false,
    verb: method.toLowerCase(),
    apiGroup: '',
    apiVersion: '',
    resource: '',
    subresource: '',
    namespace: '',
    name: '',
  };
  let rest: string[];
  if (parts[0] === 'api' && parts.length >= 2) {
    attrs.apiVersion = parts[1] as string;
    rest = parts.slice(2);
  } else if (parts[0] === 'apis' && parts.length >= 3) {
    attrs.apiGroup = parts[1] as string;
    attrs.apiVersion = parts[2] as string;
    rest = parts.slice(3);
  } else {
    return attrs;
  }
  if (rest.length === 0) return attrs;
  attrs.resourceRequest = true;
  if (rest[0] === 'namespaces' && rest.length >= 2) {
    attrs.namespace = rest[1] as string;
    // `namespaces/<ns>` alone (or its status/finalize) is the Namespace itself; anything else is scoped by it.
    if (rest.length > 2 && rest[2] !== 'status' && rest[2] !== 'finalize') rest = rest.slice(2);
  }
  attrs.resource = rest[0] ?? '';
  attrs.name = rest[1] ?? '';
  attrs.subresource = rest[2] ?? '';
  const m = method.toUpperCase();
  attrs.verb =
    m === 'GET' || m === 'HEAD'
      ? attrs.name !== ''
        ? 'get'
        : query.get('watch') === 'true' || query.get('watch') === '1'
          ? 'watch'
          : 'list'
      : m === 'POST'
        ? 'create'
        : m === 'PUT'
          ? 'update'
          : m === 'PATCH'
            ? 'patch'
            : m === 'DELETE'
              ? attrs.name !== ''
                ? 'delete'
                : 'deletecollection'
              : m.toLowerCase();
  return attrs;
}

/** Whether one of the Roles allows the request (RBAC's rule matching: groups, resources, verbs, names, wildcards). */
export function rbacAllows(rbac: FakeRbac, a: RequestAttributes): boolean {
  // Discovery and other non-resource paths: the system:discovery ClusterRole, bound to every authenticated user.
  if (!a.resourceRequest) return true;
  const resource = a.subresource === '' ? a.resource : `${a.resource}/${a.subresource}`;
  return rbac.roles.some(
    (role) =>
      role.namespace === a.namespace &&
      role.rules.some(
        (r) =>
          (r.apiGroups.includes(a.apiGroup) || r.apiGroups.includes('*')) &&
          (r.resources.includes(resource) ||
            r.resources.includes('*') ||
            (a.subresource !== '' && (r.resources.includes(`*/${a.subresource}`) || r.resources.includes(`${a.resource}/*`)))) &&
          (r.verbs.includes(a.verb) || r.verbs.includes('*')) &&
          (r.resourceNames === undefined || r.resourceNames.length === 0 || r.resourceNames.includes(a.name)),
      ),
  );
}

/**
 * Throws kube-apiserver's 403 when the Roles do not allow the request: `responsewriters.Forbidden` with the
 * message of `forbiddenMessage` inside `apierrors.NewForbidden` (the RBAC authorizer gives no reason of its own).
 */
function authorize(rbac: FakeRbac, a: RequestAttributes): void {
  if (rbacAllows(rbac, a)) return;
  const resource = a.subresource === '' ? a.resource : `${a.resource}/${a.subresource}`;
  const scope = a.namespace === '' ? 'at the cluster scope' : `in the namespace ${JSON.stringify(a.namespace)}`;
  const why = `User ${JSON.stringify(rbac.user)} cannot ${a.verb} resource ${JSON.stringify(resource)} in API group ${JSON.stringify(a.apiGroup)} ${scope}`;
  const qualified = a.apiGroup === '' ? a.resource : `${a.resource}.${a.apiGroup}`;
  const message = a.name === '' ? `${qualified} is forbidden: ${why}` : `${qualified} ${JSON.stringify(a.name)} is forbidden: ${why}`;
  // StatusDetails fields are omitempty.
  const details: JsonObject = {};
  if (a.name !== '') details.name = a.name;
  if (a.apiGroup !== '') details.group = a.apiGroup;
  if (a.resource !== '') details.kind = a.resource;
  throw new ApiError(403, 'Forbidden', message, details);
}

// ---------------------------------------------------------------------------------------------------
// Helpers

function apiVersionOf(type: ResourceType): string {
  return type.group === '' ? type.version : `${type.group}/${type.version}`;
}

/** How the apiserver names a resource in messages: `leases.coordination.k8s.io`. */
function resourceName(type: ResourceType): string {
  return type.group === '' ? type.plural : `${type.plural}.${type.group}`;
}

function details(type: ResourceType, name: string): JsonObject {
  return { name, group: type.group, kind: type.plural };
}

function statusBody(err: ApiError): JsonObject {
  const body: JsonObject = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: err.message,
    reason: err.reason,
    code: err.code,
  };
  if (err.details) body.details = err.details;
  return body;
}

/** kube-apiserver's answer for a path nothing serves (no such group, version or resource): empty details. */
function notFoundPath(): ApiError {
  return new ApiError(404, 'NotFound', 'the server could not find the requested resource', {});
}

function invalid(type: ResourceType, name: string, message: string): ApiError {
  return new ApiError(422, 'Invalid', `${type.kind}.${type.group} "${name}" is invalid: ${message}`, details(type, name));
}

function decodeError(type: ResourceType, field: string, expected: string): ApiError {
  return new ApiError(400, 'BadRequest', `json: cannot unmarshal into Go struct field ${type.kind}.${field} of type ${expected}`);
}

function unsupportedPatch(contentType: string | undefined, custom: boolean): ApiError {
  const accepted = custom
    ? 'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml'
    : 'application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml';
  const note = contentType?.startsWith('application/apply-patch') ? ' (server-side apply is not implemented by this fake)' : '';
  return new ApiError(
    415,
    'UnsupportedMediaType',
    `the body of the request was in an unknown format - accepted media types include: ${accepted}${note}`,
  );
}

function matches(match: RequestMatch, method: string, path: string): boolean {
  if (match.method !== undefined && match.method.toUpperCase() !== method.toUpperCase()) return false;
  if (match.path === undefined) return true;
  return typeof match.path === 'string' ? match.path === path : match.path.test(path);
}

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function clone<T>(v: T): T {
  return structuredClone(v);
}

function dropNulls(v: Json): Json {
  if (Array.isArray(v)) return v.map(dropNulls);
  if (!isObject(v)) return v;
  const out: JsonObject = {};
  for (const [k, val] of Object.entries(v)) if (val !== null) out[k] = dropNulls(val);
  return out;
}

function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Anything but metadata and status changed (what bumps metadata.generation of a custom resource). */
function specChanged(a: KubeObject, b: KubeObject): boolean {
  const strip = (o: KubeObject): JsonObject => {
    const { metadata: _m, status: _s, ...rest } = o;
    return rest;
  };
  return !isDeepStrictEqual(strip(a), strip(b));
}

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: Json, patch: Json): Json {
  if (!isObject(patch)) return clone(patch);
  const out: JsonObject = isObject(target) ? target : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k] ?? null, v);
  }
  return out;
}

/** RFC 6902 JSON patch; throws on a failed `test` or a missing path. */
export function jsonPatch(doc: Json, ops: unknown[]): Json {
  let root = doc;
  for (const raw of ops) {
    if (!isObject(raw) || typeof raw.op !== 'string' || typeof raw.path !== 'string') throw new Error('malformed operation');
    const op = raw;
    const path = pointer(op.path as string);
    switch (op.op) {
      case 'add':
        root = put(root, path, clone(op.value as Json), true);
        break;
      case 'replace':
        get(root, path);
        root = put(root, path, clone(op.value as Json), false);
        break;
      case 'remove':
        root = del(root, path);
        break;
      case 'test':
        if (!isDeepStrictEqual(get(root, path), op.value)) throw new Error(`test failed at ${String(op.path)}`);
        break;
      case 'move':
      case 'copy': {
        if (typeof op.from !== 'string') throw new Error(`${op.op} needs "from"`);
        const from = pointer(op.from);
        const value = clone(get(root, from));
        if (op.op === 'move') root = del(root, from);
        root = put(root, path, value, true);
        break;
      }
      default:
        throw new Error(`unknown operation ${String(op.op)}`);
    }
  }
  return root;
}

function pointer(p: string): string[] {
  if (p === '') return [];
  if (!p.startsWith('/')) throw new Error(`invalid JSON pointer ${p}`);
  return p
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function get(doc: Json, path: string[]): Json {
  let cur: Json = doc;
  for (const seg of path) {
    if (Array.isArray(cur)) {
      const i = Number(seg);
      if (!Number.isInteger(i) || i < 0 || i >= cur.length) throw new Error(`path /${path.join('/')} not found`);
      cur = cur[i] as Json;
    } else if (isObject(cur) && seg in cur) {
      cur = cur[seg] as Json;
    } else {
      throw new Error(`path /${path.join('/')} not found`);
    }
  }
  return cur;
}

function put(doc: Json, path: string[], value: Json, insert: boolean): Json {
  if (path.length === 0) return value;
  const parent = get(doc, path.slice(0, -1));
  const last = path[path.length - 1] as string;
  if (Array.isArray(parent)) {
    const i = last === '-' ? parent.length : Number(last);
    if (!Number.isInteger(i) || i < 0 || i > parent.length || (!insert && i === parent.length)) throw new Error(`bad array index ${last}`);
    if (insert) parent.splice(i, 0, value);
    else parent[i] = value;
  } else if (isObject(parent)) {
    parent[last] = value;
  } else {
    throw new Error(`path /${path.join('/')} has no parent object`);
  }
  return doc;
}

function del(doc: Json, path: string[]): Json {
  if (path.length === 0) throw new Error('cannot remove the whole document');
  get(doc, path);
  const parent = get(doc, path.slice(0, -1));
  const last = path[path.length - 1] as string;
  if (Array.isArray(parent)) parent.splice(Number(last), 1);
  else if (isObject(parent)) delete parent[last];
  return doc;
}
