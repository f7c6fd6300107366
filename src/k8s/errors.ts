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
  | 'E_KUBE_BAD_OBJECT';

export class KubeError extends CodedError {
  override readonly name = 'KubeError';
  constructor(
    readonly code: KubeErrorCode,
    message: string,
    options?: { cause?: unknown; status?: number },
  ) {
    super(message, options);
    this.status = options?.status;
  }
  /** HTTP status of the API answer, when there was one. */
  readonly status: number | undefined;
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
    super(statusCode(status), `${statusMessage(body) ?? `HTTP ${status}`} (HTTP ${status})`, { status });
  }
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
    return new KubeError(err.code, `${what}: ${statusMessage(err.body) ?? `HTTP ${status}`} (HTTP ${status})`, { cause: err, status });
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
