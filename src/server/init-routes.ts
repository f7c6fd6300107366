import { EtcdbrError } from '../errors.js';
import type { FastifyInstance } from 'fastify';
import { yaml } from '../config/yaml.js';
import type { PodEnvironment } from '../config/pod-environment.js';
import { readEtcdConfigTemplate, renderMemberConfig, type ClusterView } from '../config/etcd-config.js';
import type { InitializationState } from './initialization.js';
import { GO_SNIFFED_TEXT, errorMessage, queryParam, sendError } from './respond.js';

export interface InitRoutesDeps {
  state: InitializationState;
  pod: PodEnvironment;
  /** What etcd says about the cluster now; rejects when etcd cannot be asked (e.g. not started yet). */
  clusterView: () => Promise<ClusterView>;
}

const ANY_METHOD = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS'] as const;

/**
 * The etcd-wrapper protocol (upstream `pkg/server/httpAPI.go`; etcd-wrapper `internal/brclient/brclient.go`): `/initialization/start`, `/initialization/status` and
 * `/config`. Bodies are small strings sent in one write; the status body has no newline (the wrapper
 * compares it exactly).
 */
export function registerInitRoutes(app: FastifyInstance, deps: InitRoutesDeps): void {
  app.route({
    method: [...ANY_METHOD],
    url: '/initialization/start',
    handler: async (request, reply) => {
      // Upstream: anything but "sanity" means a full validation.
      deps.state.start(queryParam(request, 'mode') === 'sanity' ? 'sanity' : 'full');
      return reply.code(200).header('content-type', GO_SNIFFED_TEXT).send('');
    },
  });
  app.route({
    method: [...ANY_METHOD],
    url: '/initialization/status',
    handler: async (_request, reply) => reply.code(200).header('content-type', GO_SNIFFED_TEXT).send(deps.state.read()),
  });
  app.route({
    method: [...ANY_METHOD],
    url: '/config',
    handler: async (_request, reply) => {
      try {
        const template = await readEtcdConfigTemplate(deps.pod.etcdConfigPath);
        const podName = deps.pod.podName ?? '';
        if (podName === '') throw new EtcdbrError('E_INVALID_INPUT', 'POD_NAME is not set: cannot tell which member this is');
        const view = await deps.clusterView().catch(() => ({ existingMembers: [], learnerPresent: false }));
        const config = renderMemberConfig(template, podName, view);
        const body = yaml().stringify(config, { sortMapEntries: true, lineWidth: 0 });
        return reply.code(200).header('content-type', 'application/yaml').send(body);
      } catch (err) {
        return sendError(reply, 500, `cannot serve the etcd config: ${errorMessage(err)}`);
      }
    },
  });
}
