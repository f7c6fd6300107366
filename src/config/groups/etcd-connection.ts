import { defineGroup } from '../schema.js';
import type { EtcdConnectionConfig } from '../types.js';

/** Etcd connection (`pkg/types/etcdconnection.go`). */
export const etcdConnectionGroup = defineGroup<EtcdConnectionConfig>({
  title: 'etcd connection',
  fields: {
    endpoints: { type: 'stringSlice', flag: 'endpoints', shorthand: 'e', usage: 'comma separated list of etcd endpoints' },
    serviceEndpoints: {
      type: 'stringSlice',
      flag: 'service-endpoints',
      usage: 'comma separated list of etcd endpoints reached through a (Kubernetes) service; used for member operations',
    },
    username: { type: 'string', flag: 'etcd-username', usage: 'etcd server username, if one is required' },
    password: { type: 'string', flag: 'etcd-password', usage: 'etcd server password, if one is required' },
    connectionTimeout: { type: 'duration', flag: 'etcd-connection-timeout', usage: 'etcd client connection timeout' },
    snapshotTimeout: { type: 'duration', flag: 'etcd-snapshot-timeout', usage: 'timeout for taking etcd snapshots' },
    defragTimeout: { type: 'duration', flag: 'etcd-defrag-timeout', usage: 'timeout for the etcd defragmentation call' },
    insecureTransport: { type: 'bool', flag: 'insecure-transport', usage: 'disable transport security for client connections' },
    insecureSkipVerify: { type: 'bool', flag: 'insecure-skip-tls-verify', usage: 'skip server certificate verification' },
    certFile: { type: 'string', flag: 'cert', usage: 'identify secure client using this TLS certificate file' },
    keyFile: { type: 'string', flag: 'key', usage: 'identify secure client using this TLS key file' },
    caFile: { type: 'string', flag: 'cacert', usage: 'verify certificates of TLS-enabled secure servers using this CA bundle' },
    maxCallSendMsgSize: { type: 'int', usage: 'maximum size of a request the etcd client sends, in bytes' },
  },
  defaults: () => ({
    endpoints: ['http://127.0.0.1:2379'],
    serviceEndpoints: [],
    username: '',
    password: '',
    connectionTimeout: 30_000,
    snapshotTimeout: 15 * 60_000,
    defragTimeout: 8 * 60_000,
    insecureTransport: true,
    // Upstream quirk (docs/design-decisions.md "Flag default of --insecure-skip-tls-verify"): the flag takes its default from --insecure-transport's, not from the struct.
    insecureSkipVerify: true,
    certFile: '',
    keyFile: '',
    caFile: '',
    maxCallSendMsgSize: 10 * 1024 * 1024,
  }),
  fileDefaults: { insecureSkipVerify: false },
  validate(c, issues, flag) {
    if (c.connectionTimeout <= 0) issues.add(`${flag('connectionTimeout')} must be greater than 0`);
    if (c.snapshotTimeout <= 0) issues.add(`${flag('snapshotTimeout')} must be greater than 0`);
    else if (c.snapshotTimeout < c.connectionTimeout) {
      issues.add(`${flag('snapshotTimeout')} must not be shorter than ${flag('connectionTimeout')}`);
    }
    if (c.defragTimeout <= 0) issues.add(`${flag('defragTimeout')} must be greater than 0`);
    if (c.maxCallSendMsgSize <= 0) issues.add(`${flag('maxCallSendMsgSize')} must be greater than 0`);
    if (c.endpoints.length === 0) issues.add(`${flag('endpoints')} must name at least one etcd endpoint`);
  },
});
