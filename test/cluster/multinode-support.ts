/** Shared pieces of the multi-node tests: etcd config templates for a test cluster, a log collector. */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { createLogger, type Logger } from '../../src/log.js';
import type { TestCluster } from '../support/cluster.js';

/**
 * The etcd config template etcd-druid would mount for member `index` (upstream `pkg/server/httpAPI.go` `/config`): per-member maps of
 * advertise URLs, the member's own listen URLs and data dir, initial-cluster of `members` (default: all).
 */
export async function writeTemplate(cluster: TestCluster, index: number, dir: string, opts: { members?: number[] } = {}): Promise<string> {
  const own = cluster.members[index]!;
  const included = (opts.members ?? cluster.members.map((_, i) => i)).map((i) => cluster.members[i]!);
  const template = {
    name: own.name,
    'data-dir': own.dataDir,
    'listen-client-urls': own.clientUrl,
    'listen-peer-urls': own.peerUrl,
    'advertise-client-urls': Object.fromEntries(included.map((m) => [m.name, [m.clientUrl]])),
    'initial-advertise-peer-urls': Object.fromEntries(included.map((m) => [m.name, [m.peerUrl]])),
    'initial-cluster': included.map((m) => `${m.name}=${m.peerUrl}`).join(','),
    'initial-cluster-token': cluster.token,
    'initial-cluster-state': 'new',
    'snapshot-count': 75000,
  };
  const path = join(dir, `etcd-${own.name}.conf.yaml`);
  await writeFile(path, stringify(template));
  return path;
}

export interface CollectedLog {
  logger: Logger;
  lines: Array<{ level: string; msg: string; [k: string]: unknown }>;
  text(): string;
}

/** A real pino logger whose JSON lines are kept for assertions. */
export function collectingLogger(): CollectedLog {
  const lines: CollectedLog['lines'] = [];
  const logger = createLogger({
    logLevel: 5,
    destination: {
      write(s: string) {
        for (const l of s.split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as CollectedLog['lines'][number]);
      },
    },
  });
  return { logger, lines, text: () => lines.map((l) => `${l.level} ${l.msg} ${JSON.stringify(l)}`).join('\n') };
}
