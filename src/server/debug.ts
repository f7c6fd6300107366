/**
 * `--enable-profiling`. Upstream mounts Go's net/http/pprof; Node has no pprof, so the same paths serve
 * what V8 offers instead: a heap snapshot and a CPU profile, both in the formats Chrome DevTools opens.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { getHeapSnapshot } from 'node:v8';
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../log.js';
import { errorMessage, queryParam, sendError } from './respond.js';

const INDEX = `etcdbrctl profiling (Node.js ${process.version}); Go's pprof profiles do not exist in this implementation.

/debug/pprof/heap                 V8 heap snapshot (.heapsnapshot, JSON). Open in Chrome DevTools > Memory.
                                  Taking it pauses the process for a while and needs memory of the order of the heap.
/debug/pprof/profile?seconds=N    V8 CPU profile over N seconds, 1 to 60, default 30 (.cpuprofile, JSON).
                                  Open in Chrome DevTools > Performance or speedscope.
`;

const DEFAULT_SECONDS = 30;
const MAX_SECONDS = 60;

export interface Profiling {
  /** Ends running CPU profiles early (server shutdown); their requests answer with what was sampled. */
  abortAll(): void;
}

function stamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-');
}

export function registerProfilingRoutes(app: FastifyInstance, logger: Logger): Profiling {
  const running = new Set<AbortController>();

  // Go's ServeMux redirects a subtree root without its slash.
  app.all('/debug/pprof', async (_request, reply) => reply.redirect('/debug/pprof/', 301));

  app.all('/debug/pprof/', async (_request, reply) => reply.code(200).header('content-type', 'text/plain; charset=utf-8').send(INDEX));

  app.all('/debug/pprof/heap', async (_request, reply) => {
    logger.info('writing a V8 heap snapshot for /debug/pprof/heap');
    return reply
      .code(200)
      .header('content-type', 'application/json')
      .header('content-disposition', `attachment; filename="heap-${stamp()}.heapsnapshot"`)
      .send(getHeapSnapshot());
  });

  app.all('/debug/pprof/profile', async (request, reply) => {
    const raw = queryParam(request, 'seconds');
    let seconds = DEFAULT_SECONDS;
    if (raw !== '') {
      seconds = /^[0-9]{1,3}$/.test(raw) ? Number(raw) : NaN;
      if (!(seconds >= 1 && seconds <= MAX_SECONDS)) {
        return sendError(
          reply,
          400,
          `invalid value ${JSON.stringify(raw)} for query parameter "seconds": want a whole number from 1 to ${MAX_SECONDS}`,
        );
      }
    }
    // One at a time: profiles would otherwise sample each other's overhead, and this bounds the cost.
    if (running.size > 0) return sendError(reply, 409, 'a CPU profile is already being taken; try again later');

    let inspector: typeof import('node:inspector/promises');
    try {
      inspector = await import('node:inspector/promises');
    } catch (err) {
      return sendError(reply, 501, `CPU profiling needs the Node.js inspector, which this runtime lacks: ${errorMessage(err)}`);
    }
    const controller = new AbortController();
    running.add(controller);
    // A client that hangs up does not need the rest of the profile.
    const onClose = (): void => {
      if (!reply.raw.writableFinished) controller.abort();
    };
    reply.raw.once('close', onClose);
    const session = new inspector.Session();
    try {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
      logger.info({ seconds }, 'taking a V8 CPU profile for /debug/pprof/profile');
      try {
        await sleep(seconds * 1000, undefined, { signal: controller.signal });
      } catch {
        // Aborted: stop now and answer with what was sampled so far.
      }
      const { profile } = await session.post('Profiler.stop');
      return reply
        .code(200)
        .header('content-type', 'application/json; charset=utf-8')
        .header('content-disposition', `attachment; filename="cpu-${stamp()}.cpuprofile"`)
        .send(JSON.stringify(profile));
    } catch (err) {
      return sendError(reply, 500, `taking a CPU profile failed: ${errorMessage(err)}`);
    } finally {
      reply.raw.off('close', onClose);
      running.delete(controller);
      session.disconnect();
    }
  });

  return {
    abortAll() {
      for (const c of running) c.abort();
    },
  };
}
