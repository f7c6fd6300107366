/**
 * Maintenance on demand (ours, DEP-05): `/maintenance/defrag` and `/maintenance/compact`, run by the leading
 * sidecar; a follower forwards the request there, as snapshot requests are.
 */
import type { CompactTarget } from '../cluster/on-demand.js';
import type { ApiAuth } from './api-auth.js';
import { httpStatusOf } from './error-status.js';
import type { Exchange, Routes } from './http-router.js';
import { delegateToLeader, type DelegationOptions, type Refusal } from './proxy.js';
import { errorMessage, sendError, sendJson } from './respond.js';
import type { HttpServerDeps } from './types.js';

/** `revision=<n>` or `keep=<n>` of `/maintenance/compact`, or what is wrong with them. */
function compactTarget(x: Exchange): CompactTarget | string {
  const out: CompactTarget = {};
  for (const key of ['revision', 'keep'] as const) {
    const raw = x.query(key);
    if (raw === '') continue;
    if (!/^\d+$/.test(raw)) return `invalid value ${JSON.stringify(raw)} for query parameter "${key}": want a non-negative integer`;
    out[key] = Number(raw);
  }
  return out;
}

/**
 * A follower asked for maintenance that it cannot forward (no leader, an unhealthy one, or the request was
 * forwarded already): 503, as the leader may be back in a moment.
 */
const NOT_LEADING: Refusal = { reason: 'this sidecar does not lead the cluster', status: 503 };

export function registerMaintenanceRoutes(
  routes: Routes,
  deps: Pick<HttpServerDeps, 'maintenance'>,
  auth: ApiAuth,
  delegation: DelegationOptions,
): void {
  // Ours: maintenance on demand (DEP-05), run by the leading sidecar; a follower forwards the request there,
  // as snapshot requests are. Compaction discards history and a defragmentation blocks each member for a
  // while, so these routes exist only behind API authentication (checked here before forwarding, and again
  // by the leader).
  for (const operation of ['defrag', 'compact'] as const) {
    routes.all(`/maintenance/${operation}`, async (x) => {
      if (!auth.enabled) {
        sendError(x.res, 403, 'maintenance routes need API authentication: configure --api-client-ca-file or --api-token-file');
        return;
      }
      const leading = deps.maintenance?.();
      if (!leading) return delegateToLeader(x, delegation, NOT_LEADING);
      if (x.method === 'GET') return sendJson(x.res, 200, leading.control.status()[operation] ?? null);
      if (x.method !== 'POST') return sendError(x.res, 405, `use POST to start a ${operation}, GET for the last outcome`);
      try {
        let outcome;
        if (operation === 'defrag') outcome = await leading.control.defrag(leading.signal);
        else {
          const target = compactTarget(x);
          if (typeof target === 'string') return sendError(x.res, 400, target);
          outcome = await leading.control.compact(target);
        }
        sendJson(x.res, outcome.state === 'succeeded' ? 200 : 500, outcome);
      } catch (err) {
        const status = httpStatusOf(err);
        sendError(x.res, status, status < 500 ? errorMessage(err) : `${operation} failed: ${errorMessage(err)}`);
      }
    });
  }
}
