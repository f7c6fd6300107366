import { EtcdbrError } from '../errors.js';
import { yaml } from '../encoding/yaml.js';
import type { PodEnvironment } from '../config/pod-environment.js';
import { readEtcdConfigTemplate, renderMemberConfig, type ClusterView } from '../config/etcd-config.js';
import type { InitializationState } from './initialization.js';
import type { Routes } from './http-router.js';
import { GO_SNIFFED_TEXT, errorMessage, send, sendError } from './respond.js';

export interface InitRoutesDeps {
  state: InitializationState;
  pod: PodEnvironment;
  /** What etcd says about the cluster now; rejects when etcd cannot be asked (e.g. not started yet). */
  clusterView: () => Promise<ClusterView>;
}

/**
 * The etcd-wrapper protocol (upstream `pkg/server/httpAPI.go`; etcd-wrapper `internal/brclient/brclient.go`): `/initialization/start`, `/initialization/status` and
 * `/config`, for every method. Bodies are small strings sent in one write; the status body has no newline
 * (the wrapper compares it exactly).
 */
export function registerInitRoutes(routes: Routes, deps: InitRoutesDeps): void {
  routes.all('/initialization/start', async (x) => {
    // Upstream: anything but "sanity" means a full validation.
    deps.state.start(x.query('mode') === 'sanity' ? 'sanity' : 'full');
    send(x.res, 200, GO_SNIFFED_TEXT, '');
  });
  routes.all('/initialization/status', async (x) => send(x.res, 200, GO_SNIFFED_TEXT, deps.state.read()));
  routes.all('/config', async (x) => {
    try {
      const template = await readEtcdConfigTemplate(deps.pod.etcdConfigPath);
      const podName = deps.pod.podName ?? '';
      if (podName === '') throw new EtcdbrError('E_INVALID_INPUT', 'POD_NAME is not set: cannot tell which member this is');
      const view = await deps.clusterView().catch(() => ({ existingMembers: [], learnerPresent: false }));
      const config = renderMemberConfig(template, podName, view);
      send(x.res, 200, 'application/yaml', (await yaml()).stringify(config, { sortMapEntries: true, lineWidth: 0 }));
    } catch (err) {
      sendError(x.res, 500, `cannot serve the etcd config: ${errorMessage(err)}`);
    }
  });
}
