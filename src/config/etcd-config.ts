import { CodedError } from '../errors.js';
import { readFile } from 'node:fs/promises';
import { yaml } from '../encoding/yaml.js';

/** Upstream's default location of the etcd config template (the ConfigMap mount). */
export const DEFAULT_ETCD_CONFIG_PATH = '/var/etcd/config/etcd.conf.yaml';

export type EtcdConfigTemplate = Record<string, unknown>;

/** `ETCD_CONF` wins everywhere, `/config` included (upstream's /config ignores it: a difference). */
export function etcdConfigPath(env: Readonly<Record<string, string | undefined>>): string {
  return env.ETCD_CONF && env.ETCD_CONF !== '' ? env.ETCD_CONF : DEFAULT_ETCD_CONFIG_PATH;
}

/**
 * Where a template read from a file came from: the file and the line of each top-level key, so that an error
 * about a value can name the line to fix. Kept beside the template (not in it: every key of the template is
 * served on /config).
 */
const SOURCES = new WeakMap<EtcdConfigTemplate, { path: string; lines: ReadonlyMap<string, number> }>();

export async function readEtcdConfigTemplate(path: string): Promise<EtcdConfigTemplate> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new EtcdConfigError(`cannot read the etcd config file ${path}: ${(err as Error).message}`, { cause: err });
  }
  const { isMap, isScalar, LineCounter, parseDocument } = await yaml();
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter });
  const [yamlError] = doc.errors;
  if (yamlError) throw new EtcdConfigError(`etcd config file ${path} is not valid YAML: ${yamlError.message}`, { cause: yamlError });
  const template: unknown = doc.toJS();
  if (!template || typeof template !== 'object' || Array.isArray(template))
    throw new EtcdConfigError(`etcd config file ${path} is not a YAML mapping`);
  const lines = new Map<string, number>();
  if (isMap(doc.contents)) {
    for (const pair of doc.contents.items) {
      const offset = isScalar(pair.key) ? pair.key.range?.[0] : undefined;
      if (isScalar(pair.key) && offset !== undefined) lines.set(String(pair.key.value), lineCounter.linePos(offset).line);
    }
  }
  SOURCES.set(template as EtcdConfigTemplate, { path, lines });
  return template as EtcdConfigTemplate;
}

/** "etcd config file <path> line <n>" for a key of a template read from a file; "etcd config" otherwise. */
function whereIs(template: EtcdConfigTemplate, key: string): string {
  const source = SOURCES.get(template);
  if (!source) return 'etcd config';
  const line = source.lines.get(key);
  return `etcd config file ${source.path}${line !== undefined ? ` line ${line}` : ''}`;
}

/** `initial-cluster` entries `name=url,name=url2,...` as ordered [name, url] pairs. */
export function parseInitialCluster(value: unknown): Array<[string, string]> {
  if (typeof value !== 'string' || value.trim() === '') return [];
  return value.split(',').map((entry) => {
    const i = entry.indexOf('=');
    if (i <= 0) throw new EtcdConfigError(`invalid initial-cluster entry ${JSON.stringify(entry)}: expected name=peer-url`);
    return [entry.slice(0, i).trim(), entry.slice(i + 1).trim()] as [string, string];
  });
}

/**
 * `initial-cluster` as etcd reads it (`types.NewURLsMap`): one member per distinct name, each with every URL
 * its entries give, in the order they first appear. etcd-druid v0.37 writes a member's name once per peer URL
 * (`spec.etcd.additionalAdvertisePeerURLs`), so entries are not members.
 */
export function initialClusterMembers(value: unknown): Map<string, string[]> {
  const members = new Map<string, string[]>();
  for (const [name, url] of parseInitialCluster(value)) {
    const urls = members.get(name);
    if (urls === undefined) members.set(name, [url]);
    else if (!urls.includes(url)) urls.push(url);
  }
  return members;
}

/** Number of members (distinct names) in an `initial-cluster` value (upstream `GetClusterSize`). */
export function initialClusterSize(value: unknown): number {
  return initialClusterMembers(value).size;
}

/** Number of members in the template's `initial-cluster` (upstream GetClusterSize). */
export function clusterSize(template: EtcdConfigTemplate): number {
  return initialClusterSize(template['initial-cluster']);
}

/** `POD_NAME`, or `<member-name-prefix>-<POD_NAME>` when the template sets a prefix (upstream v0.43). */
export function memberName(template: EtcdConfigTemplate, podName: string): string {
  const prefix = template['member-name-prefix'];
  return typeof prefix === 'string' && prefix !== '' ? `${prefix}-${podName}` : podName;
}

/**
 * This member's URLs from a `member-name -> [url]` map (or a plain string/list, for hand-written files), or
 * from the legacy template of older etcd-druid releases, `<scheme>@<service>@<namespace>@<port>`, which
 * stands for `<scheme>://<POD_NAME>.<service>.<namespace>.svc:<port>` (the pod's DNS name behind the headless
 * service). `podName` is the pod's own name for that expansion; it defaults to the member name, which is the
 * pod name unless the template sets `member-name-prefix` (which the legacy format predates).
 */
export function memberUrls(template: EtcdConfigTemplate, key: string, member: string, podName: string = member): string[] {
  const value = template[key];
  const legacy = legacyUrlTemplate(template, key);
  if (legacy) return [`${legacy.scheme}://${podName}.${legacy.service}.${legacy.namespace}.svc:${legacy.port}`];
  if (typeof value === 'string')
    return value
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  if (Array.isArray(value)) return value.map(String);
  if (value && typeof value === 'object') {
    const mine = (value as Record<string, unknown>)[member];
    if (typeof mine === 'string')
      return mine
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
    if (Array.isArray(mine)) return mine.map(String);
  }
  return [];
}

/** A malformed etcd config file: names the file or the key and what is accepted there. */
export class EtcdConfigError extends CodedError {
  override readonly name = 'EtcdConfigError';
  readonly code = 'E_ETCD_CONFIG';
}

/** The legacy URL template `<scheme>@<service>@<namespace>@<port>` of older etcd-druid releases. */
export interface LegacyUrlTemplate {
  scheme: 'http' | 'https';
  service: string;
  namespace: string;
  port: number;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * Recognises the legacy template in a config value; undefined for anything else that has no `@` (URL lists,
 * maps). A value with `@` that is not a well-formed template is an error naming where it is (`where`, e.g.
 * the file and line), the key and the accepted forms, rather than a URL etcd would refuse later with a less
 * helpful message. Pure: {@link legacyUrlTemplate} is the same for a key of a template read from a file.
 */
export function parseLegacyUrlTemplate(key: string, value: unknown, where = 'etcd config'): LegacyUrlTemplate | undefined {
  if (typeof value !== 'string' || !value.includes('@')) return undefined;
  const text = value.trim();
  const parts = text.split('@');
  const [scheme, service, namespace, portText] = parts;
  const port = Number(portText);
  const wellFormed =
    parts.length === 4 &&
    (scheme === 'http' || scheme === 'https') &&
    DNS_LABEL.test(service ?? '') &&
    DNS_LABEL.test(namespace ?? '') &&
    /^\d{1,5}$/.test(portText ?? '') &&
    port > 0 &&
    port < 65536;
  if (!wellFormed) {
    throw new EtcdConfigError(
      `${where}: ${key}: ${JSON.stringify(value)} is not a valid URL template; accepted are a URL list ` +
        `("https://host:2379,..."), a map of member name to URLs, or the legacy template "<http|https>@<service>@<namespace>@<port>"`,
    );
  }
  return { scheme: scheme as 'http' | 'https', service: service!, namespace: namespace!, port };
}

/** The legacy template under `key` of a template (see {@link parseLegacyUrlTemplate}); errors name file and line. */
export function legacyUrlTemplate(template: EtcdConfigTemplate, key: string): LegacyUrlTemplate | undefined {
  return parseLegacyUrlTemplate(key, template[key], whereIs(template, key));
}

/**
 * Whether all of this member's peer URLs in the etcd config use https (upstream `IsPeerURLTLSEnabled`, the
 * member lease's TLS annotation and the EtcdMember's `peerTLSEnabled`); undefined when the config has none.
 */
export function peerUrlsUseTls(template: EtcdConfigTemplate, podName: string): boolean | undefined {
  const urls = memberUrls(template, 'initial-advertise-peer-urls', memberName(template, podName), podName);
  return urls.length === 0 ? undefined : urls.every((u) => u.startsWith('https://'));
}

export interface ClusterView {
  /** Names of the members that currently exist (empty when etcd could not be asked). */
  existingMembers: string[];
  /** Whether a learner currently exists (upstream: `existing` state when one does). */
  learnerPresent: boolean;
}

/**
 * The config served on `/config` (upstream `pkg/server/httpAPI.go` `/config` handler): the template with this member's name, its own peer and
 * client URLs flattened to comma-separated strings, `initial-cluster` filtered to existing members plus
 * ourselves, and `initial-cluster-state`. Every other key passes through unchanged.
 */
export function renderMemberConfig(template: EtcdConfigTemplate, podName: string, view: ClusterView): EtcdConfigTemplate {
  const name = memberName(template, podName);
  const peerUrls = memberUrls(template, 'initial-advertise-peer-urls', name, podName);
  const clientUrls = memberUrls(template, 'advertise-client-urls', name, podName);
  if (peerUrls.length === 0) throw new EtcdConfigError(`the etcd config has no initial-advertise-peer-urls for member ${name}`);
  if (clientUrls.length === 0) throw new EtcdConfigError(`the etcd config has no advertise-client-urls for member ${name}`);
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
  out['initial-cluster-state'] = clusterSize(template) <= 1 ? 'new' : view.learnerPresent ? 'existing' : 'new';
  return out;
}

/** Who a restored single member is: its name, peer URLs and the `initial-cluster` etcd's restore writes. */
export interface RestoreIdentity {
  name: string;
  initialCluster: string;
  peerUrls: string[];
}

/**
 * The identity a single-member restore gives the data dir when the etcd config names this member: the
 * config's member name and every peer URL it advertises (etcd-druid's `additionalAdvertisePeerURLs`
 * included), so etcd starts on the restored dir advertising what its config says, with no MemberUpdate and
 * restart afterwards. Upstream restores with the restoration flags (defaults `default` and
 * `http://localhost:2380`) and corrects the peer URLs once etcd runs. Undefined when the config does not
 * list this member with URLs: the flags are used then.
 */
export function restoreIdentityFromConfig(template: EtcdConfigTemplate, podName: string): RestoreIdentity | undefined {
  const name = memberName(template, podName);
  const entries = initialClusterMembers(template['initial-cluster']).get(name);
  if (entries === undefined) return undefined;
  const advertised = memberUrls(template, 'initial-advertise-peer-urls', name, podName);
  const peerUrls = advertised.length > 0 ? advertised : entries;
  return { name, initialCluster: peerUrls.map((u) => `${name}=${u}`).join(','), peerUrls };
}
