import { posix } from 'node:path';

/** Go's `path.Clean`: like posix.normalize, but without a trailing slash (except for "/"). */
export function cleanPath(p: string): string {
  const n = posix.normalize(p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

/** etcd's `types.NewURLs` rules for one URL; undefined when valid. */
function urlError(raw: string): string | undefined {
  const s = raw.trim();
  // Parsed by hand: WHATWG URL normalises default ports and empty paths away, which etcd does not.
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)([^?#]*)/.exec(s);
  const scheme = m?.[1]?.toLowerCase();
  if (m === null || scheme === undefined || !['http', 'https', 'unix', 'unixs'].includes(scheme)) {
    return `URL scheme must be http, https, unix, or unixs: ${s}`;
  }
  const host = (m[2] ?? '').replace(/^.*@/, '');
  if ((scheme === 'http' || scheme === 'https') && !/^(\[[^\]]+\]|[^:[\]]*):[^:]*$/.test(host)) {
    return `URL address does not have the form "host:port": ${s}`;
  }
  if ((m[3] ?? '') !== '') return `URL must not contain a path: ${s}`;
  return undefined;
}

/** etcd's `types.NewURLs`: a non-empty list of valid URLs. */
export function urlListError(urls: readonly string[]): string | undefined {
  if (urls.length === 0) return 'no valid URLs given';
  for (const u of urls) {
    const err = urlError(u);
    if (err !== undefined) return err;
  }
  return undefined;
}

/** etcd's `types.NewURLsMap` for `name=url,name=url` (a name may repeat for several URLs). */
export function urlsMapError(s: string): string | undefined {
  const byName = new Map<string, string[]>();
  for (const kv of s.split(',')) {
    if (kv === '') continue;
    const i = kv.indexOf('=');
    const name = i >= 0 ? kv.slice(0, i) : kv;
    const value = i >= 0 ? kv.slice(i + 1) : '';
    byName.set(name, [...(byName.get(name) ?? []), value]);
  }
  for (const urls of byName.values()) {
    const err = urlListError(urls);
    if (err !== undefined) return err;
  }
  return undefined;
}
