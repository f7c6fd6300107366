// What the bundled CLI (scripts/build.mjs) gives prom-client in place of @opentelemetry/api. prom-client
// requires the API as its process-CPU metric loads, but reads it only to attach exemplars (trace ids), which
// etcdbrctl never turns on, as etcd-backup-restore's metrics have none; the real package (45 modules) loaded in
// every sidecar all the same. Here it loads on the first property read, so a prom-client that does use it
// gets the real API. Only `get` and `has` are forwarded: the API's exports are non-configurable accessors,
// which a proxy may not report as its own.
'use strict';

let api;
const load = () => (api ??= require('@opentelemetry/api'));

module.exports = new Proxy(
  {},
  {
    get: (_target, key) => load()[key],
    has: (_target, key) => key in load(),
  },
);
