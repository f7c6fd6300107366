/**
 * `node:http` and `node:https` through `require`, for ES modules. An ES module that imports `node:http` makes
 * Node build that module's ESM facade, which reads every export, and three of them (WebSocket, CloseEvent,
 * MessageEvent) are getters that load Node's bundled undici. A bare Node 24 holds 59.8 MiB after
 * `import 'node:http'` and 47.6 MiB after requiring it; an idle sidecar never needs undici. Type-only imports
 * of `node:http` cost nothing (TypeScript erases them). test/architecture/builtin-imports.test.ts keeps other
 * modules from importing the two directly.
 */
import { createRequire } from 'node:module';
import type * as Http from 'node:http';
import type * as Https from 'node:https';

const require = createRequire(import.meta.url);

export const nodeHttp = require('node:http') as typeof Http;
export const nodeHttps = require('node:https') as typeof Https;
