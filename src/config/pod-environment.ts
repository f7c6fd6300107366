import { etcdConfigPath } from './etcd-config.js';

/** The process environment, as the CLI received it. */
export type Env = Readonly<Record<string, string | undefined>>;

/**
 * What the pod's environment says about where this process runs. The CLI reads it once from the process
 * environment and hands it down, so that nothing below the config layer looks up `POD_NAME` & co. itself.
 */
export interface PodEnvironment {
  /** `POD_NAME`: the pod, and so the etcd member (with the config's member-name-prefix if any); undefined when unset. */
  podName?: string;
  /** `POD_NAMESPACE`; undefined when unset. */
  podNamespace?: string;
  /** `ETCD_CONF`, or upstream's default location of the etcd config template. */
  etcdConfigPath: string;
  /** `ETCD_BIN`: an explicit etcd binary (tests, hand runs); etcd is looked up on `searchPath` otherwise. */
  etcdBin?: string;
  /** `PATH`, for etcd, etcdctl and etcdutl. */
  searchPath: string;
  /** `ETCDBRCTL_DEFRAG_RETRY_PERIOD` as written (a Go duration); the maintenance parses and checks it. */
  defragRetryPeriod?: string;
}

export const DEFRAG_RETRY_PERIOD_ENV = 'ETCDBRCTL_DEFRAG_RETRY_PERIOD';

export function podEnvironment(env: Env): PodEnvironment {
  return {
    ...(env.POD_NAME !== undefined ? { podName: env.POD_NAME } : {}),
    ...(env.POD_NAMESPACE !== undefined ? { podNamespace: env.POD_NAMESPACE } : {}),
    etcdConfigPath: etcdConfigPath(env),
    ...(env.ETCD_BIN !== undefined ? { etcdBin: env.ETCD_BIN } : {}),
    searchPath: env.PATH ?? '',
    ...(env[DEFRAG_RETRY_PERIOD_ENV] !== undefined ? { defragRetryPeriod: env[DEFRAG_RETRY_PERIOD_ENV] } : {}),
  };
}

/** Where findEtcdBinaries looks: ETCD_BIN when set, PATH otherwise. */
export function etcdBinaryLookup(pod: PodEnvironment): { etcdBin?: string; path: string } {
  return { ...(pod.etcdBin !== undefined ? { etcdBin: pod.etcdBin } : {}), path: pod.searchPath };
}
