import { readFile } from 'node:fs/promises';
import { parse } from 'yaml';

/** Upstream's default location of the etcd config template (the ConfigMap mount). */
export const DEFAULT_ETCD_CONFIG_PATH = '/var/etcd/config/etcd.conf.yaml';

export type EtcdConfigTemplate = Record<string, unknown>;

/** `ETCD_CONF` wins everywhere, `/config` included (upstream's /config ignores it: a difference). */
export function etcdConfigPath(env: Readonly<Record<string, string | undefined>>): string {
  return env.ETCD_CONF && env.ETCD_CONF !== '' ? env.ETCD_CONF : DEFAULT_ETCD_CONFIG_PATH;
}

export async function readEtcdConfigTemplate(path: string): Promise<EtcdConfigTemplate> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the etcd config file ${path}: ${(err as Error).message}`, { cause: err });
  }
  const doc: unknown = parse(text);
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`etcd config file ${path} is not a YAML mapping`);
  return doc as EtcdConfigTemplate;
}

/** `initial-cluster` entries `name=url,name=url2,...` as ordered [name, url] pairs. */
export function parseInitialCluster(value: unknown): Array<[string, string]> {
  if (typeof value !== 'string' || value.trim() === '') return [];
  return value.split(',').map((entry) => {
    const i = entry.indexOf('=');
    if (i <= 0) throw new Error(`invalid initial-cluster entry ${JSON.stringify(entry)}: expected name=peer-url`);
    return [entry.slice(0, i).trim(), entry.slice(i + 1).trim()] as [string, string];
  });
}

/** Number of members in the template's `initial-cluster` (upstream GetClusterSize). */
export function clusterSize(template: EtcdConfigTemplate): number {
  return parseInitialCluster(template['initial-cluster']).length;
}

/** `POD_NAME`, or `<member-name-prefix>-<POD_NAME>` when the template sets a prefix (upstream v0.43). */
export function memberName(template: EtcdConfigTemplate, podName: string): string {
  const prefix = template['member-name-prefix'];
  return typeof prefix === 'string' && prefix !== '' ? `${prefix}-${podName}` : podName;
}

/** This member's URLs from a `member-name -> [url]` map (or a plain string/list, for hand-written files). */
export function memberUrls(template: EtcdConfigTemplate, key: string, member: string): string[] {
  const value = template[key];
  if (typeof value === 'string') return value.split(',').map((s) => s.trim()).filter(Boolean);
  if (Array.isArray(value)) return value.map(String);
  if (value && typeof value === 'object') {
    const mine = (value as Record<string, unknown>)[member];
    if (typeof mine === 'string') return mine.split(',').map((s) => s.trim()).filter(Boolean);
    if (Array.isArray(mine)) return mine.map(String);
  }
  return [];
}

export interface ClusterView {
  /** Names of the members that currently exist (empty when etcd could not be asked). */
  existingMembers: string[];
  /** Whether a learner currently exists (upstream: `existing` state when one does). */
  learnerPresent: boolean;
}

/**
 * The config served on `/config` (upstream §12): the template with this member's name, its own peer and
 * client URLs flattened to comma-separated strings, `initial-cluster` filtered to existing members plus
 * ourselves, and `initial-cluster-state`. Every other key passes through unchanged.
 */
export function renderMemberConfig(template: EtcdConfigTemplate, podName: string, view: ClusterView): EtcdConfigTemplate {
  const name = memberName(template, podName);
  const peerUrls = memberUrls(template, 'initial-advertise-peer-urls', name);
  const clientUrls = memberUrls(template, 'advertise-client-urls', name);
  if (peerUrls.length === 0) throw new Error(`the etcd config has no initial-advertise-peer-urls for member ${name}`);
  if (clientUrls.length === 0) throw new Error(`the etcd config has no advertise-client-urls for member ${name}`);
  const out: EtcdConfigTemplate = { ...template };
  out.name = name;
  out['initial-advertise-peer-urls'] = peerUrls.join(',');
  out['advertise-client-urls'] = clientUrls.join(',');
  const cluster = parseInitialCluster(template['initial-cluster']);
  if (view.existingMembers.length > 1) {
    const keep = new Set([...view.existingMembers, name]);
    out['initial-cluster'] = cluster
      .filter(([n]) => keep.has(n))
      .map(([n, u]) => `${n}=${u}`)
      .join(',');
  }
  out['initial-cluster-state'] = cluster.length <= 1 ? 'new' : view.learnerPresent ? 'existing' : 'new';
  return out;
}
