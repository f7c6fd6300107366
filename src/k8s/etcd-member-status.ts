/**
 * The EtcdMember `status` subresource on the wire: read the history a previous run left, and write the status
 * by JSON merge patch on `/status` (etcd-druid creates and deletes the EtcdMember; only its member writes the
 * status). What goes into the body is decided by the pure model in src/cluster/member-status.ts, and when to
 * send it by src/cluster/member-status-publisher.ts; this module only talks to the API server.
 */
import type { Clock } from '../clock.js';
import type { KubeClient } from './client.js';
import { toKubeError } from './errors.js';
import { ETCD_MEMBER, type EtcdMemberRef } from './etcd-member.js';
import { MERGE_PATCH, requestOptions, withDeadline } from './lease.js';

/** The parts of an existing status a new run carries on (unchecked: the model validates them). */
export interface StoredEtcdMemberStatus {
  transitions?: unknown;
  snapshots?: unknown;
}

/** Reads the EtcdMember's current status; a missing EtcdMember fails with E_KUBE_NOT_FOUND. */
export async function readEtcdMemberStatus(
  kube: KubeClient,
  ref: EtcdMemberRef,
  clock: Clock,
  timeoutMs: number,
): Promise<StoredEtcdMemberStatus | undefined> {
  const what = `get EtcdMember ${ref.namespace}/${ref.name}`;
  return withDeadline(clock, timeoutMs, what, async (signal) => {
    try {
      const obj = await kube.customObjects.getNamespacedCustomObject({ ...ETCD_MEMBER, ...ref }, requestOptions(signal));
      return (obj as { status?: StoredEtcdMemberStatus } | undefined)?.status;
    } catch (err) {
      throw toKubeError(err, what, signal);
    }
  });
}

/** Merges `status` into the EtcdMember's status subresource; a missing EtcdMember fails with E_KUBE_NOT_FOUND. */
export async function patchEtcdMemberStatus(
  kube: KubeClient,
  ref: EtcdMemberRef,
  status: object,
  clock: Clock,
  timeoutMs: number,
): Promise<void> {
  const what = `patch EtcdMember ${ref.namespace}/${ref.name} status`;
  await withDeadline(clock, timeoutMs, what, async (signal) => {
    try {
      await kube.customObjects.patchNamespacedCustomObjectStatus(
        { ...ETCD_MEMBER, ...ref, body: { status } },
        requestOptions(signal, MERGE_PATCH),
      );
    } catch (err) {
      throw toKubeError(err, what, signal);
    }
  });
}
