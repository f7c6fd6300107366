/**
 * `node:http` and `node:https` through `require`, for ES modules. An ES module that imports `node:http` makes
 * Node build that module's ESM facade, which reads every export, and three of them (WebSocket, CloseEvent,
 * MessageEvent) are getters that load Node's bundled undici. A bare Node 24 holds 59.8 MiB after
 * `import 'node:http'` and 47.6 MiB after requiring it; an idle sidecar never needs undici. Type-only imports
 * of `node:http` cost nothing (TypeScript erases them). test/architecture/builtin-imports.test.ts keeps other
 * modules from importing the two directly.
 *
 * Required on first use, not when this module loads: the two (with `node:tls` behind `https`) take ~10 ms of
 * a process's start, and a command that never makes or serves a request (a restore from a Local store)
 * should not pay for them.
 */
import { createRequire } from 'node:module';
import type * as Http from 'node:http';
import type * as Https from 'node:https';

const require = createRequire(import.meta.url);

let http: typeof Http | undefined;
let https: typeof Https | undefined;

/** `node:http`, loaded by the first call. */
export function nodeHttp(): typeof Http {
  return (http ??= require('node:http') as typeof Http);
}

/** `node:https`, loaded by the first call. */
export function nodeHttps(): typeof Https {
  return (https ??= require('node:https') as typeof Https);
}
