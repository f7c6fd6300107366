/** Helpers of the defragmentation, member cleanup and peer URL tests. */
import { Etcd3 } from 'etcd3';
import type { Logger } from '@etcdbrctl/snapstore';
import type { EndpointClientFactory } from '../../src/cluster/defrag.js';
import { memberStatus } from '../../src/cluster/leadership.js';
import { createEtcdClient } from '../../src/etcd/index.js';
import type { TestCluster } from '../support/cluster.js';
import { etcdClient } from '../support/etcd-client.js';
import { waitFor } from '../support/wait.js';

export interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
  fields: Record<string, unknown>;
}

/** A logger that keeps every entry, for asserting what the runners reported and in which order. */
export function recordingLogger(): Logger & { entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  const at =
    (level: LogEntry['level']) =>
    (obj: object | string, msg?: string): void => {
      if (typeof obj === 'string') entries.push({ level, msg: obj, fields: {} });
      else entries.push({ level, msg: msg ?? '', fields: obj as Record<string, unknown> });
    };
  return { entries, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** Plain-text clients on loopback, as the sidecar would build them from `--endpoints`. */
export const plainEndpointClient: EndpointClientFactory = (endpoint) =>
  createEtcdClient({ endpoints: [endpoint], insecureTransport: true, insecureSkipVerify: false, connectionTimeoutMs: 2_000 });

/** Name of the member leading right now (asks each running member until one answers). */
export async function leaderName(cluster: TestCluster): Promise<string> {
  for (const m of cluster.members) {
    if (!cluster.running.has(m.name)) continue;
    const c = etcdClient(m.clientUrl);
    try {
      const st = await memberStatus(c, 2_000);
      if (st.leaderId === '0') continue;
      const list = await c.memberList();
      const leader = list.members.find((x) => x.id === st.leaderId);
      if (leader) return leader.name;
    } catch {
      // try the next member
    } finally {
      c.close();
    }
  }
  throw new Error('no member knows a leader');
}

/** Makes `name` the raft leader (MoveLeader through the current leader, again until the cluster reports it). */
export async function makeLeader(cluster: TestCluster, name: string): Promise<void> {
  await waitFor(
    async () => {
      const current = await leaderName(cluster).catch(() => undefined);
      if (current === name) return true;
      if (current !== undefined) {
        const from = cluster.members.find((m) => m.name === current);
        const c = new Etcd3({ hosts: from?.clientUrl ?? '' });
        try {
          const list = await c.cluster.memberList({});
          const target = list.members.find((m) => m.name === name);
          if (target) await c.maintenance.moveLeader({ targetID: target.ID }).catch(() => undefined);
        } finally {
          c.close();
        }
      }
      return undefined;
    },
    `${name} to lead`,
    20_000,
    200,
  );
}
