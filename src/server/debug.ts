/**
 * `--enable-profiling`. Upstream mounts Go's net/http/pprof; Node has no pprof, so the same paths serve
 * what V8 offers instead: a heap snapshot and a CPU profile, both in the formats Chrome DevTools opens.
 */
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { getHeapSnapshot } from 'node:v8';
import type { Logger } from '../log.js';
import type { Routes } from './http-router.js';
import { errorMessage, send, sendError } from './respond.js';

const INDEX = `etcdbrctl profiling (Node.js ${process.version}); Go's pprof profiles do not exist in this implementation.

/debug/pprof/heap                 V8 heap snapshot (.heapsnapshot, JSON). Open in Chrome DevTools > Memory.
                                  Taking it pauses the process for a while and needs memory of the order of the heap.
/debug/pprof/profile?seconds=N    V8 CPU profile over N seconds, 1 to 60, default 30 (.cpuprofile, JSON).
                                  Open in Chrome DevTools > Performance or speedscope.
`;

const DEFAULT_SECONDS = 30;
const MAX_SECONDS = 60;

export interface Profiling {
  /**
   * Ends running CPU profiles early (server shutdown); resolves once their requests have answered with what
   * was sampled, so that the server closes their connections only after.
   */
  abortAll(): Promise<void>;
}

function stamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-');
}

export function registerProfilingRoutes(routes: Routes, logger: Logger): Profiling {
  /** Each running profile's abort, and the end of its request. */
  const running = new Map<AbortController, Promise<void>>();

  // Go's ServeMux redirects a subtree root without its slash (http.Redirect: a small HTML body for GET and HEAD).
  routes.all('/debug/pprof', async (x) => {
    const body = x.method === 'GET' || x.method === 'HEAD' ? '<a href="/debug/pprof/">Moved Permanently</a>.\n\n' : '';
    send(x.res, 301, 'text/html; charset=utf-8', body, { location: '/debug/pprof/' });
  });

  routes.all('/debug/pprof/', async (x) => send(x.res, 200, 'text/plain; charset=utf-8', INDEX));

  routes.all('/debug/pprof/heap', async (x) => {
    logger.info('writing a V8 heap snapshot for /debug/pprof/heap');
    x.res.writeHead(200, {
      'content-type': 'application/json',
      'content-disposition': `attachment; filename="heap-${stamp()}.heapsnapshot"`,
    });
    // Streamed: the snapshot is of the order of the heap. A client that goes away ends the pipeline.
    await pipeline(getHeapSnapshot(), x.res).catch((err: unknown) => logger.warn({ err }, 'sending the heap snapshot failed'));
  });

  routes.all('/debug/pprof/profile', async (x) => {
    const { res } = x;
    const raw = x.query('seconds');
    let seconds = DEFAULT_SECONDS;
    if (raw !== '') {
      seconds = /^[0-9]{1,3}$/.test(raw) ? Number(raw) : NaN;
      if (!(seconds >= 1 && seconds <= MAX_SECONDS)) {
        sendError(
          res,
          400,
          `invalid value ${JSON.stringify(raw)} for query parameter "seconds": want a whole number from 1 to ${MAX_SECONDS}`,
        );
        return;
      }
    }
    // One at a time: profiles would otherwise sample each other's overhead, and this bounds the cost.
    if (running.size > 0) {
      sendError(res, 409, 'a CPU profile is already being taken; try again later');
      return;
    }

    let inspector: typeof import('node:inspector/promises');
    try {
      inspector = await import('node:inspector/promises');
    } catch (err) {
      sendError(res, 501, `CPU profiling needs the Node.js inspector, which this runtime lacks: ${errorMessage(err)}`);
      return;
    }
    const controller = new AbortController();
    let answered!: () => void;
    running.set(
      controller,
      new Promise<void>((resolve) => {
        answered = resolve;
      }),
    );
    // A client that hangs up does not need the rest of the profile.
    const onClose = (): void => {
      if (!res.writableFinished) controller.abort();
    };
    res.once('close', onClose);
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
      send(res, 200, 'application/json; charset=utf-8', JSON.stringify(profile), {
        'content-disposition': `attachment; filename="cpu-${stamp()}.cpuprofile"`,
      });
    } catch (err) {
      sendError(res, 500, `taking a CPU profile failed: ${errorMessage(err)}`);
    } finally {
      res.off('close', onClose);
      running.delete(controller);
      // Answered once the bytes are out: 'close' follows 'finish', or a connection that went away.
      if (res.writableFinished) answered();
      else res.once('close', answered);
      session.disconnect();
    }
  });

  return {
    async abortAll() {
      const ends = [...running].map(([controller, end]) => {
        controller.abort();
        return end;
      });
      await Promise.all(ends);
    },
  };
}
