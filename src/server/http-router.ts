/**
 * The routing the sidecar's API needs and no more: exact paths, every method on each (Go's ServeMux, as
 * upstream's `RegisterHandler` uses it), and the query read as Go reads it. On Node's own `http.Server`:
 * fastify cost an idle sidecar 5-6 MiB of RSS and ~250 of the ~510 modules it loaded (the schema compiler and
 * validator, plugin loader and router) for routing that fits here, and upstream parses no request bodies.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { EtcdbrError } from '../errors.js';

/** One request and its response, as a route handler sees them. */
export class Exchange {
  private params: URLSearchParams | undefined;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    /** The path, percent-decoded, without the query (Go's `r.URL.Path`). */
    readonly path: string,
  ) {}

  get method(): string {
    return this.req.method ?? 'GET';
  }

  /** The request target as sent: path and query. */
  get url(): string {
    return this.req.url ?? '/';
  }

  /** The client's address, for logs and `X-Forwarded-For`. */
  get ip(): string {
    return this.req.socket.remoteAddress ?? '';
  }

  /** The first value of a query parameter, '' when absent (Go's `r.URL.Query().Get`). */
  query(name: string): string {
    this.params ??= new URL(this.url, 'http://localhost').searchParams;
    return this.params.get(name) ?? '';
  }
}

/** Answers the request: writes the whole response, or rejects with a typed error the server turns into one. */
export type Handler = (x: Exchange) => Promise<void>;

export class Routes {
  private readonly table = new Map<string, Handler>();

  /** Serves `path` exactly (no prefix, no trailing-slash variant) for every method. */
  all(path: string, handler: Handler): void {
    if (this.table.has(path)) throw new EtcdbrError('E_INTERNAL', `route ${path} is registered twice`);
    this.table.set(path, handler);
  }

  find(path: string): Handler | undefined {
    return this.table.get(path);
  }
}

/** The path of a request target, percent-decoded; undefined when an escape is malformed (Go answers 400). */
export function requestPath(url: string): string | undefined {
  const raw = url.split('?', 1)[0] ?? '/';
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}
