import { createRequire } from 'node:module';

type YamlLibrary = typeof import('yaml');
let library: YamlLibrary | undefined;

/**
 * The yaml library (about 70 modules) loads on first use: only a command given a config file, or one that
 * reads the etcd config template, pays for it; a plain `etcdbrctl restore` starts without it.
 */
export function yaml(): YamlLibrary {
  return (library ??= createRequire(import.meta.url)('yaml') as YamlLibrary);
}
