/**
 * Lease primitives shared by the snapshot leases and the member lease: read, JSON merge patch, MicroTime,
 * request deadlines and client-go's RetryOnConflict. Leases are created by etcd-druid; we only read and patch.
 */
import { EtcdbrError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { KubeClient, Lease } from './client.js';
import type { RequestOptions } from './http.js';
import { KubeError, isKubeError, toKubeError } from './errors.js';

/** The content type of a JSON merge patch (RFC 7386); what every patch we send uses. */
export const MERGE_PATCH = 'application/merge-patch+json';

export interface LeaseRef {
  namespace: string;
  name: string;
}

/** A JSON merge patch for a Lease; `null` deletes a field (RFC 7386). */
export interface LeaseMergePatch {
  metadata?: { resourceVersion?: string; annotations?: Record<string, string | null> };
  spec?: { holderIdentity?: string | null; renewTime?: string | null };
}

/**
 * metav1.MicroTime on the wire: RFC 3339 with exactly six fractional digits, UTC. The apiserver parses it
 * with that exact layout, so JavaScript's millisecond ISO string would be rejected.
 */
export function formatMicroTime(d: Date): string {
  const iso = d.toISOString();
  if (!iso.endsWith('Z') || iso.length !== 24)
    throw new EtcdbrError('E_INTERNAL', `time ${iso} cannot be written as a Kubernetes MicroTime`);
  return `${iso.slice(0, 23)}000Z`;
}

/** Reads a lease; a missing one is E_KUBE_NOT_FOUND with a message that says who should create it. */
export async function getLease(kube: KubeClient, ref: LeaseRef, signal: AbortSignal, purpose: string): Promise<Lease> {
  const what = `get lease ${ref.namespace}/${ref.name}`;
  try {
    return await kube.coordination.readNamespacedLease({ name: ref.name, namespace: ref.namespace }, requestOptions(signal));
  } catch (err) {
    const e = toKubeError(err, what, signal);
    if (e.code === 'E_KUBE_NOT_FOUND') {
      throw new KubeError(
        'E_KUBE_NOT_FOUND',
        `lease ${ref.namespace}/${ref.name} (${purpose}) does not exist in Kubernetes; it is not created by etcdbrctl ` +
          `but by etcd-druid: create it, or fix the lease name / POD_NAMESPACE, or disable the lease renewal flag`,
        { cause: e, status: 404 },
      );
    }
    throw e;
  }
}

/** Sends a JSON merge patch (with `metadata.resourceVersion` in it, the apiserver checks it: 409 on mismatch). */
export async function mergePatchLease(kube: KubeClient, ref: LeaseRef, patch: LeaseMergePatch, signal: AbortSignal): Promise<Lease> {
  try {
    return await kube.coordination.patchNamespacedLease(
      { name: ref.name, namespace: ref.namespace, body: patch },
      requestOptions(signal, MERGE_PATCH),
    );
  } catch (err) {
    throw toKubeError(err, `patch lease ${ref.namespace}/${ref.name}`, signal);
  }
}

/** Options of one call: the caller's abort signal and, for a patch, its type. */
export function requestOptions(signal: AbortSignal): RequestOptions;
export function requestOptions(signal: AbortSignal, contentType: string): RequestOptions & { contentType: string };
export function requestOptions(signal: AbortSignal, contentType?: string): RequestOptions {
  return contentType === undefined ? { signal } : { signal, contentType };
}

/**
 * Runs `fn` with a signal that aborts after `ms` on `clock` (upstream: context.WithTimeout around the update).
 * The abort reason is an E_KUBE_TIMEOUT error, so a timed-out request reports as a timeout.
 */
export async function withDeadline<T>(
  clock: Clock,
  ms: number,
  what: string,
  fn: (signal: AbortSignal) => Promise<T>,
  parent?: AbortSignal,
): Promise<T> {
  const ac = new AbortController();
  const timer = clock.setTimeout(() => ac.abort(new KubeError('E_KUBE_TIMEOUT', `${what} did not finish within ${ms / 1000} s`)), ms);
  const onParentAbort = (): void => ac.abort(parent?.reason);
  if (parent?.aborted) onParentAbort();
  else parent?.addEventListener('abort', onParentAbort, { once: true });
  try {
    return await fn(ac.signal);
  } catch (err) {
    if (ac.signal.aborted && ac.signal.reason instanceof KubeError && !isKubeError(err, 'E_KUBE_TIMEOUT')) {
      throw toKubeError(err, what, ac.signal);
    }
    throw err;
  } finally {
    clock.clearTimeout(timer);
    parent?.removeEventListener('abort', onParentAbort);
  }
}

/**
 * client-go `retry.RetryOnConflict(retry.DefaultBackoff, fn)`: up to 4 attempts, sleeping 10 ms, 50 ms, 250 ms
 * (±10 % jitter) between them, only while `fn` fails with a 409 Conflict; the last conflict is returned.
 */
export async function retryOnConflict<T>(clock: Clock, signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
  const steps = 4;
  let delay = 10;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!isKubeError(err, 'E_KUBE_CONFLICT') || attempt >= steps) throw err;
    }
    await clock.sleep(delay * (1 + Math.random() * 0.1), signal).catch((reason: unknown) => {
      throw reason instanceof KubeError ? reason : new KubeError('E_KUBE_TIMEOUT', 'retry on conflict aborted', { cause: reason });
    });
    delay *= 5;
  }
}
