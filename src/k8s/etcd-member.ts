/**
 * The EtcdMember resource (etcd-druid proposal 04-etcd-member-custom-resource.md) as far as bootstrapping needs it: etcd-druid puts the
 * `druid.gardener.cloud/create-as-learner` annotation on the EtcdMember of a member it creates during
 * scale-up, and the member drops it once promoted. Read only when Kubernetes is enabled; a missing EtcdMember,
 * and a resource this sidecar cannot use (no CRD, no RBAC rule: etcd-member-access.ts), simply mean "no annotation".
 */
import type { Clock } from '../clock.js';
import { isKubeError, isResourceNotServed, toKubeError } from './errors.js';
import { ETCD_MEMBER, type EtcdMemberAccess } from './etcd-member-access.js';
import { MERGE_PATCH, requestOptions, withDeadline } from './lease.js';

export const CREATE_AS_LEARNER_ANNOTATION = 'druid.gardener.cloud/create-as-learner';

export interface EtcdMemberRef {
  namespace: string;
  name: string;
}

/** Whether the EtcdMember carries `create-as-learner: "true"`; false when there is no EtcdMember to read. */
export async function readCreateAsLearner(access: EtcdMemberAccess, ref: EtcdMemberRef, clock: Clock, timeoutMs: number): Promise<boolean> {
  const what = `get EtcdMember ${ref.namespace}/${ref.name}`;
  try {
    return await access.call({ verb: 'get', ...ref }, (kube) =>
      withDeadline(clock, timeoutMs, what, async (signal) => {
        let obj: unknown;
        try {
          obj = await kube.customObjects.getNamespacedCustomObject({ ...ETCD_MEMBER, ...ref }, requestOptions(signal));
        } catch (err) {
          const e = toKubeError(err, what, signal);
          // No such EtcdMember (yet); a resource not served at all is the access check's to report.
          if (e.code === 'E_KUBE_NOT_FOUND' && !isResourceNotServed(e)) return false;
          throw e;
        }
        const annotations = (obj as { metadata?: { annotations?: Record<string, string> } }).metadata?.annotations ?? {};
        return annotations[CREATE_AS_LEARNER_ANNOTATION] === 'true';
      }),
    );
  } catch (err) {
    if (isKubeError(err, 'E_KUBE_UNAVAILABLE')) return false;
    throw err;
  }
}

/** Drops the annotation after promotion (JSON merge patch with null); a missing or unusable EtcdMember is fine. */
export async function clearCreateAsLearner(access: EtcdMemberAccess, ref: EtcdMemberRef, clock: Clock, timeoutMs: number): Promise<void> {
  const what = `patch EtcdMember ${ref.namespace}/${ref.name}`;
  try {
    await access.call({ verb: 'patch', ...ref }, (kube) =>
      withDeadline(clock, timeoutMs, what, async (signal) => {
        try {
          await kube.customObjects.patchNamespacedCustomObject(
            { ...ETCD_MEMBER, ...ref, body: { metadata: { annotations: { [CREATE_AS_LEARNER_ANNOTATION]: null } } } },
            requestOptions(signal, MERGE_PATCH),
          );
        } catch (err) {
          const e = toKubeError(err, what, signal);
          if (e.code === 'E_KUBE_NOT_FOUND' && !isResourceNotServed(e)) return;
          throw e;
        }
      }),
    );
  } catch (err) {
    if (!isKubeError(err, 'E_KUBE_UNAVAILABLE')) throw err;
  }
}
