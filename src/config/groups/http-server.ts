import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { defineGroup } from '../schema.js';
import type { HttpServerConfig } from '../types.js';

/** HTTP server (`pkg/server/init.go`). */
export const httpServerGroup = defineGroup<HttpServerConfig>({
  title: 'HTTP server',
  fields: {
    port: { type: 'uint', flag: 'server-port', shorthand: 'p', usage: 'port on which the HTTP server listens' },
    address: {
      type: 'string',
      flag: 'server-address',
      usage: 'IP address the HTTP server listens on (ours); empty: every interface, as upstream',
    },
    enableProfiling: { type: 'bool', flag: 'enable-profiling', usage: 'serve /debug/pprof profiling endpoints' },
    serverCert: { type: 'string', flag: 'server-cert', fileKey: 'server-cert', usage: 'TLS certificate of the HTTP server' },
    serverKey: { type: 'string', flag: 'server-key', fileKey: 'server-key', usage: 'TLS key of the HTTP server' },
  },
  defaults: () => ({ port: 8080, address: '', enableProfiling: false, serverCert: '', serverKey: '' }),
  validate(c, issues, flag) {
    if (c.port > 65535) issues.add(`${flag('port')} must be a TCP port (0-65535), got ${c.port}`);
    if (c.address !== '' && isIP(c.address) === 0) issues.add(`${flag('address')} must be an IP address, got ${JSON.stringify(c.address)}`);
    // TLS is on only when both are set; then both files must exist (as upstream checks at start).
    if (c.serverCert !== '' && c.serverKey !== '') {
      if (!existsSync(c.serverCert)) issues.add(`${flag('serverCert')}: file ${c.serverCert} does not exist`);
      if (!existsSync(c.serverKey)) issues.add(`${flag('serverKey')}: file ${c.serverKey} does not exist`);
    }
  },
});
