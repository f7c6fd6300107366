/** `/healthz` (upstream's health status) and `/metrics` (Prometheus text). */
import type { Routes } from './http-router.js';
import { errorMessage, send, sendError, sendJson } from './respond.js';
import type { HttpServerDeps } from './types.js';

export function registerProbeRoutes(routes: Routes, deps: Pick<HttpServerDeps, 'health' | 'metrics'>): void {
  const { health, metrics } = deps;
  routes.all('/healthz', async (x) => sendJson(x.res, health.status, { health: health.status === 200 }));

  routes.all('/metrics', async (x) => {
    let text: string;
    try {
      text = await metrics.registry.metrics();
    } catch (err) {
      sendError(x.res, 500, `collecting metrics failed: ${errorMessage(err)}`);
      return;
    }
    send(x.res, 200, metrics.registry.contentType, text);
  });
}
