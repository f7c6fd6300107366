/**
 * Typed Kubernetes errors with stable codes. Callers branch on `code` (conflict ⇒ retry, not found ⇒ tell the
 * operator the lease must exist), never on message text. Messages name the object and what to do.
 */
import { CodedError } from '../errors.js';

export type KubeErrorCode =
  /** No usable client configuration (kubeconfig, in-cluster files, server URL). */
  | 'E_KUBE_CONFIG'
  /** The object does not exist (404). */
  | 'E_KUBE_NOT_FOUND'
  /** Optimistic lock failed: the object changed since it was read (409). */
  | 'E_KUBE_CONFLICT'
  /** Credentials rejected or RBAC does not allow the request (401/403). */
  | 'E_KUBE_FORBIDDEN'
  /** The request did not finish within its deadline. */
  | 'E_KUBE_TIMEOUT'
  /** The API server could not be reached (connection refused, DNS, TLS). */
  | 'E_KUBE_UNREACHABLE'
  /** Any other error answer of the API server. */
  | 'E_KUBE_REQUEST'
  /** The object holds a value we cannot interpret (e.g. a non-numeric snapshot lease holder). */
  | 'E_KUBE_BAD_OBJECT'
  /**
   * An optional resource this sidecar cannot use: the API server does not serve it (no CRD) or RBAC forbids
   * the call. Found out once (src/k8s/etcd-member-access.ts) and not asked again.
   */
  | 'E_KUBE_UNAVAILABLE';

/** The parts of a Kubernetes `Status` error body callers branch on (metav1.Status reason and details). */
export interface ApiStatus {
  /** e.g. `NotFound`, `Forbidden`, `Conflict`. */
  reason?: string;
  /** The object the answer is about; empty when the path itself is not served. */
  details?: { name?: string; group?: string; kind?: string };
}

export class KubeError extends CodedError {
  override readonly name = 'KubeError';
  constructor(
    readonly code: KubeErrorCode,
    message: string,
    options?: { cause?: unknown; status?: number; apiStatus?: ApiStatus },
  ) {
    super(message, options);
    this.status = options?.status;
    this.apiStatus = options?.apiStatus;
  }
  /** HTTP status of the API answer, when there was one. */
  readonly status: number | undefined;
  /** Reason and details of the API server's `Status` answer, when it sent one. */
  readonly apiStatus: ApiStatus | undefined;
}

export function isKubeError(err: unknown, code?: KubeErrorCode): err is KubeError {
  return err instanceof KubeError && (code === undefined || err.code === code);
}

/**
 * A non-2xx answer of the API server as the transport (http.ts) saw it: the status and the raw body, which for
 * Kubernetes is a `Status` object. toKubeError turns it into the typed code and a message naming the request.
 */
export class KubeStatusError extends KubeError {
  constructor(
    status: number,
    readonly body: string,
  ) {
    const apiStatus = parseApiStatus(body);
    super(statusCode(status), `${statusMessage(body) ?? `HTTP ${status}`} (HTTP ${status})`, {
      status,
      ...(apiStatus === undefined ? {} : { apiStatus }),
    });
  }
}

/**
 * A 404 for the path itself rather than for an object: the API server does not serve the group, version or
 * resource (a CRD that is not installed). kube-apiserver answers that with a `Status` whose details name no
 * object ("the server could not find the requested resource"); a missing object's details carry its name.
 */
export function isResourceNotServed(err: KubeError): boolean {
  return err.status === 404 && err.apiStatus?.reason === 'NotFound' && (err.apiStatus.details?.name ?? '') === '';
}

function statusCode(status: number): KubeErrorCode {
  return status === 404
    ? 'E_KUBE_NOT_FOUND'
    : status === 409
      ? 'E_KUBE_CONFLICT'
      : status === 401 || status === 403
        ? 'E_KUBE_FORBIDDEN'
        : status === 504
          ? 'E_KUBE_TIMEOUT'
          : 'E_KUBE_REQUEST';
}

/**
 * Wraps whatever a transport call threw. `what` names the request ("get lease ns/name"); `signal` tells a
 * deadline abort (our timeout) apart from other aborts.
 */
export function toKubeError(err: unknown, what: string, signal?: AbortSignal): KubeError {
  if (err instanceof KubeStatusError) {
    const status = err.status ?? 0;
    return new KubeError(err.code, `${what}: ${statusMessage(err.body) ?? `HTTP ${status}`} (HTTP ${status})`, {
      cause: err,
      status,
      ...(err.apiStatus === undefined ? {} : { apiStatus: err.apiStatus }),
    });
  }
  if (err instanceof KubeError) return err;
  if (signal?.aborted) {
    const reason: unknown = signal.reason;
    if (reason instanceof KubeError) return new KubeError(reason.code, `${what}: ${reason.message}`, { cause: err });
    return new KubeError('E_KUBE_TIMEOUT', `${what}: aborted`, { cause: err });
  }
  return new KubeError('E_KUBE_UNREACHABLE', `${what}: the Kubernetes API server could not be reached: ${transportDetail(err)}`, {
    cause: err,
  });
}

/** A transport failure (ECONNREFUSED, ENOTFOUND, a TLS verification error), with its cause chain named. */
function transportDetail(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const message = e instanceof Error ? e.message : String(e);
    if (message !== '' && !parts.includes(message)) parts.push(message);
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.length === 0 ? 'unknown error' : parts.join(': ');
}

/** Reason and details of a `Status` body (JSON text of kind Status); undefined for anything else. */
function parseApiStatus(body: string): ApiStatus | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body) as unknown;
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || (value as { kind?: unknown }).kind !== 'Status') return undefined;
  const { reason, details } = value as { reason?: unknown; details?: unknown };
  const out: ApiStatus = {};
  if (typeof reason === 'string') out.reason = reason;
  if (typeof details === 'object' && details !== null) {
    const d: NonNullable<ApiStatus['details']> = {};
    for (const key of ['name', 'group', 'kind'] as const) {
      const v = (details as Record<string, unknown>)[key];
      if (typeof v === 'string') d[key] = v;
    }
    out.details = d;
  }
  return out;
}

/** The `message` of a Kubernetes `Status` body (JSON text); other text is shown trimmed. */
function statusMessage(body: unknown): string | undefined {
  let value: unknown = body;
  if (typeof body === 'string') {
    try {
      value = JSON.parse(body) as unknown;
    } catch {
      return body.trim() === '' ? undefined : body.trim().slice(0, 300);
    }
  }
  if (typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string') {
    return (value as { message: string }).message;
  }
  return undefined;
}
