/**
 * Whether this sidecar can use the EtcdMember resource at all, found out from the first answer that says so.
 *
 * The EtcdMember (druid.gardener.cloud/v1alpha1 `etcdmembers`, etcd-druid proposal 04) is optional: no released
 * etcd-druid installs its CRD, and etcd-druid v0.37's Role for the etcd pods grants leases, statefulsets and
 * pods only. RBAC is checked before routing, so such a cluster answers 403 Forbidden even though the resource
 * does not exist; a cluster that grants the rule but has no CRD answers 404 for the path itself. Either answer
 * will not change while the sidecar runs, so it is reported in one line naming the resource and the rule to
 * grant, and every later EtcdMember call fails at once with E_KUBE_UNAVAILABLE, without a request: no retry
 * loop, no warning per attempt, nothing else (leases, backups) affected. A 404 for an EtcdMember object
 * that does not exist yet (etcd-druid creates it later) is not this: its callers wait for it.
 */
import type { Logger } from '@etcdbrctl/snapstore';
import type { KubeClient } from './client.js';
import { isResourceNotServed, KubeError } from './errors.js';

/** The resource, as RBAC rules and the API name it. */
export const ETCD_MEMBER = { group: 'druid.gardener.cloud', version: 'v1alpha1', plural: 'etcdmembers' } as const;

/**
 * The Role rules the EtcdMember features need: read the EtcdMember and drop its create-as-learner annotation,
 * write its status. deploy/example/optional/etcdmember-rbac.yaml grants exactly these.
 */
export const ETCD_MEMBER_RBAC_RULES = [
  { apiGroups: [ETCD_MEMBER.group], resources: [ETCD_MEMBER.plural], verbs: ['get', 'patch'] },
  { apiGroups: [ETCD_MEMBER.group], resources: [`${ETCD_MEMBER.plural}/status`], verbs: ['patch'] },
] as const;

/** One EtcdMember request, as RBAC sees it. */
export interface EtcdMemberCall {
  verb: 'get' | 'patch';
  /** `status` for the status subresource. */
  subresource?: 'status';
  namespace: string;
  name: string;
}

export class EtcdMemberAccess {
  /** Set once the API server said the resource cannot be used; thrown by every call after that. */
  private verdict: KubeError | undefined;

  constructor(
    readonly kube: KubeClient,
    private readonly logger: Logger,
  ) {}

  /** false once the API server answered 403 or "not served" to an EtcdMember request. */
  get usable(): boolean {
    return this.verdict === undefined;
  }

  /**
   * Runs one EtcdMember request (`run` throws KubeError). Fails with E_KUBE_UNAVAILABLE, without sending
   * anything, once the resource is known to be unusable; a 403 or a "not served" 404 answer makes it so.
   * Any other error is the caller's (a missing object, a timeout, a 5xx: worth retrying).
   */
  async call<T>(call: EtcdMemberCall, run: (kube: KubeClient) => Promise<T>): Promise<T> {
    if (this.verdict) throw this.verdict;
    try {
      return await run(this.kube);
    } catch (err) {
      if (err instanceof KubeError && (err.status === 403 || isResourceNotServed(err))) throw this.unusable(err, call);
      throw err;
    }
  }

  private unusable(err: KubeError, call: EtcdMemberCall): KubeError {
    // Concurrent calls may both learn it: the first one reports.
    if (this.verdict) return this.verdict;
    const resource = `${ETCD_MEMBER.group}/${ETCD_MEMBER.version} ${ETCD_MEMBER.plural}`;
    const denied = `${call.verb} ${ETCD_MEMBER.plural}${call.subresource === undefined ? '' : `/${call.subresource}`}`;
    const rules = ETCD_MEMBER_RBAC_RULES.map(
      (r) => `{apiGroups: [${r.apiGroups.join(', ')}], resources: [${r.resources.join(', ')}], verbs: [${r.verbs.join(', ')}]}`,
    ).join(' and ');
    const cause =
      err.status === 403
        ? `the API server forbids ${denied} on ${resource} in namespace ${call.namespace} (HTTP 403; etcd-druid v0.37 grants ` +
          'the etcd pods no access to EtcdMembers and installs no EtcdMember resource)'
        : `the API server does not serve ${resource} (HTTP 404 for the resource itself: the EtcdMember CRD is not installed; ` +
          'no released etcd-druid installs it)';
    const message =
      `EtcdMember status publishing and the create-as-learner annotation are off until the sidecar restarts: ${cause}. ` +
      `To turn them on, install the EtcdMember CRD and bind the pods' service account in namespace ${call.namespace} to a Role ` +
      `of its own (etcd-druid rewrites the Role it manages) with the rules ${rules}, as in deploy/example/optional/etcdmember-rbac.yaml`;
    this.verdict = new KubeError('E_KUBE_UNAVAILABLE', message, {
      cause: err,
      ...(err.status === undefined ? {} : { status: err.status }),
    });
    this.logger.info(
      { resource, namespace: call.namespace, request: `${denied} ${call.name}`, status: err.status, answer: err.message },
      message,
    );
    return this.verdict;
  }
}
