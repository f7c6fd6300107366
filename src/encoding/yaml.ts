export type YamlLibrary = typeof import('yaml');
let library: Promise<YamlLibrary> | undefined;

/**
 * The yaml library loads on first use: only a command given a config file, or one that reads the etcd config
 * template, or a kubeconfig (src/k8s/kubeconfig.ts), pays for it; a plain `etcdbrctl restore` starts without
 * it. A dynamic import, so the bundle (scripts/build.mjs) holds it as a chunk of its own, loaded here: the
 * package's 74 CommonJS modules loaded one by one held ~9 MiB more in a bare Node than the one chunk.
 */
export function yaml(): Promise<YamlLibrary> {
  // The module's exports are its `default` both ways it can load: a Node import of the CommonJS package (which
  // also names each export) and the bundle's chunk (which exports `default` only).
  return (library ??= import('yaml').then((m) => (m as { default?: YamlLibrary }).default ?? m));
}
