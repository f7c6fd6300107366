/**
 * The EtcdMember resource (etcd-druid proposal 04-etcd-member-custom-resource.md) as far as bootstrapping needs it: etcd-druid puts the
 * `druid.gardener.cloud/create-as-learner` annotation on the EtcdMember of a member it creates during
 * scale-up, and the member drops it once promoted. Read only when Kubernetes is enabled; a missing resource
 * (older druid, no CRD) simply means "no annotation".
 */
import type { Clock } from '../clock.js';
import type { KubeClient } from './client.js';
import { toKubeError } from './errors.js';
import { MERGE_PATCH, requestOptions, withDeadline } from './lease.js';

export const CREATE_AS_LEARNER_ANNOTATION = 'druid.gardener.cloud/create-as-learner';

export const ETCD_MEMBER = { group: 'druid.gardener.cloud', version: 'v1alpha1', plural: 'etcdmembers' } as const;

export interface EtcdMemberRef {
  namespace: string;
  name: string;
}

/** Whether the EtcdMember carries `create-as-learner: "true"`; false when there is no EtcdMember. */
export async function readCreateAsLearner(kube: KubeClient, ref: EtcdMemberRef, clock: Clock, timeoutMs: number): Promise<boolean> {
  const what = `get EtcdMember ${ref.namespace}/${ref.name}`;
  return withDeadline(clock, timeoutMs, what, async (signal) => {
    let obj: unknown;
    try {
      obj = await kube.customObjects.getNamespacedCustomObject({ ...ETCD_MEMBER, ...ref }, requestOptions(signal));
    } catch (err) {
      const e = toKubeError(err, what, signal);
      if (e.code === 'E_KUBE_NOT_FOUND') return false;
      throw e;
    }
    const annotations = (obj as { metadata?: { annotations?: Record<string, string> } }).metadata?.annotations ?? {};
    return annotations[CREATE_AS_LEARNER_ANNOTATION] === 'true';
  });
}

/** Drops the annotation after promotion (JSON merge patch with null); a missing EtcdMember is fine. */
export async function clearCreateAsLearner(kube: KubeClient, ref: EtcdMemberRef, clock: Clock, timeoutMs: number): Promise<void> {
  const what = `patch EtcdMember ${ref.namespace}/${ref.name}`;
  await withDeadline(clock, timeoutMs, what, async (signal) => {
    try {
      await kube.customObjects.patchNamespacedCustomObject(
        { ...ETCD_MEMBER, ...ref, body: { metadata: { annotations: { [CREATE_AS_LEARNER_ANNOTATION]: null } } } },
        requestOptions(signal, MERGE_PATCH),
      );
    } catch (err) {
      const e = toKubeError(err, what, signal);
      if (e.code !== 'E_KUBE_NOT_FOUND') throw e;
    }
  });
}
