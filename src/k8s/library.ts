/**
 * The one place `@kubernetes/client-node` is loaded at run time. The library and what it pulls in (undici,
 * jose, ws, yaml, openid and proxy agents, …) hold about 85 MB of a sidecar's memory, and most invocations
 * never talk to Kubernetes: the rest of src/k8s imports its types only, and createKubeClient loads it here
 * when a Kubernetes feature is switched on (test/architecture/kube-boundary.test.ts keeps it that way).
 */
import { EtcdbrError } from '../errors.js';

export type KubeLibrary = typeof import('@kubernetes/client-node');

let loaded: KubeLibrary | undefined;

/** Loads the library once; every later call returns the same module. */
export async function loadKubeLibrary(): Promise<KubeLibrary> {
  loaded ??= await import('@kubernetes/client-node');
  return loaded;
}

/** The library if a client was built already; undefined when nothing loaded it (then none of its errors exist either). */
export function loadedKubeLibrary(): KubeLibrary | undefined {
  return loaded;
}

/** The library, for code that only runs with a client in hand (a KubeClient exists only after loadKubeLibrary). */
export function kubeLibrary(): KubeLibrary {
  if (loaded === undefined) throw new EtcdbrError('E_INTERNAL', 'the Kubernetes client library is used before a client was built');
  return loaded;
}
