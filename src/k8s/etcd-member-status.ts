/**
 * The EtcdMember `status` subresource on the wire: read the history a previous run left, and write the status
 * by JSON merge patch on `/status` (etcd-druid creates and deletes the EtcdMember; only its member writes the
 * status). What goes into the body is decided by the pure model in src/cluster/member-status.ts, and when to
 * send it by src/cluster/member-status-publisher.ts; this module only talks to the API server, through the
 * access check (etcd-member-access.ts) that stops all EtcdMember requests once the resource proves unusable.
 */
import type { Clock } from '../clock.js';
import { toKubeError } from './errors.js';
import { ETCD_MEMBER, type EtcdMemberAccess } from './etcd-member-access.js';
import type { EtcdMemberRef } from './etcd-member.js';
import { MERGE_PATCH, requestOptions, withDeadline } from './lease.js';

/** The parts of an existing status a new run carries on (unchecked: the model validates them). */
export interface StoredEtcdMemberStatus {
  transitions?: unknown;
  snapshots?: unknown;
}

/**
 * Reads the EtcdMember's current status. A missing EtcdMember fails with E_KUBE_NOT_FOUND; a resource this
 * sidecar cannot use (403, not served) with E_KUBE_UNAVAILABLE.
 */
export async function readEtcdMemberStatus(
  access: EtcdMemberAccess,
  ref: EtcdMemberRef,
  clock: Clock,
  timeoutMs: number,
): Promise<StoredEtcdMemberStatus | undefined> {
  const what = `get EtcdMember ${ref.namespace}/${ref.name}`;
  return access.call({ verb: 'get', ...ref }, (kube) =>
    withDeadline(clock, timeoutMs, what, async (signal) => {
      try {
        const obj = await kube.customObjects.getNamespacedCustomObject({ ...ETCD_MEMBER, ...ref }, requestOptions(signal));
        return (obj as { status?: StoredEtcdMemberStatus } | undefined)?.status;
      } catch (err) {
        throw toKubeError(err, what, signal);
      }
    }),
  );
}

/** Merges `status` into the EtcdMember's status subresource; fails as readEtcdMemberStatus does. */
export async function patchEtcdMemberStatus(
  access: EtcdMemberAccess,
  ref: EtcdMemberRef,
  status: object,
  clock: Clock,
  timeoutMs: number,
): Promise<void> {
  const what = `patch EtcdMember ${ref.namespace}/${ref.name} status`;
  await access.call({ verb: 'patch', subresource: 'status', ...ref }, (kube) =>
    withDeadline(clock, timeoutMs, what, async (signal) => {
      try {
        await kube.customObjects.patchNamespacedCustomObjectStatus(
          { ...ETCD_MEMBER, ...ref, body: { status } },
          requestOptions(signal, MERGE_PATCH),
        );
      } catch (err) {
        throw toKubeError(err, what, signal);
      }
    }),
  );
}
