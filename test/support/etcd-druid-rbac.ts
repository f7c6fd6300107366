/**
 * What etcd-druid v0.37.1 (tag v0.37.1, commit b4f4a3e670fcd7dffa83420d583ca04dcf5f9a8a) creates for the etcd
 * pods of an Etcd: a ServiceAccount, a Role and a RoleBinding (internal/component/serviceaccount,
 * internal/component/role and internal/component/rolebinding, buildResource and getLabels; names from
 * api/core/v1alpha1/helper.go, labels from api/core/v1alpha1/constants.go and internal/common/constants.go).
 * Written down from those sources as facts, so the tests can hold deploy/example and the sidecar's requests
 * against the permissions operators run with today. The ownerReference to the Etcd is left out.
 */
import type { PolicyRule } from './fake-kube.js';

/** The Role's rules (role.go buildResource): no create on leases, nothing for EtcdMembers. */
export const DRUID_V037_ETCD_ROLE_RULES: readonly PolicyRule[] = [
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'list', 'patch', 'update', 'watch'] },
  { apiGroups: ['apps'], resources: ['statefulsets'], verbs: ['get', 'list', 'patch', 'update', 'watch'] },
  { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
];

/** The three objects for the Etcd `etcd` in `namespace`, as plain manifests. */
export function druidV037EtcdRbac(etcd: string, namespace: string) {
  const defaults = { 'app.kubernetes.io/managed-by': 'etcd-druid', 'app.kubernetes.io/part-of': etcd };
  const roleName = `druid.gardener.cloud:etcd:${etcd}`;
  // A Role name holds ':', which label values may not: the name label has '-' instead.
  const roleLabelName = roleName.replaceAll(':', '-');
  return {
    serviceAccount: {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: {
        name: etcd,
        namespace,
        labels: { ...defaults, 'app.kubernetes.io/component': 'etcd-service-account', 'app.kubernetes.io/name': etcd },
      },
      // !DisableEtcdServiceAccountAutomount, false by default.
      automountServiceAccountToken: true,
    },
    role: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: {
        name: roleName,
        namespace,
        labels: { ...defaults, 'app.kubernetes.io/component': 'etcd-role', 'app.kubernetes.io/name': roleLabelName },
      },
      rules: DRUID_V037_ETCD_ROLE_RULES.map((r) => ({ apiGroups: [...r.apiGroups], resources: [...r.resources], verbs: [...r.verbs] })),
    },
    roleBinding: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: {
        name: roleName,
        namespace,
        labels: { ...defaults, 'app.kubernetes.io/component': 'etcd-role-binding', 'app.kubernetes.io/name': roleLabelName },
      },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: roleName },
      subjects: [{ kind: 'ServiceAccount', name: etcd, namespace }],
    },
  };
}
