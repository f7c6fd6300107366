/**
 * src/etcd is the only door to etcd: no module outside it may import an etcd client library (they take an
 * EtcdClient), and inside it the etcd3 library is not used at all (its gRPC stack cost the idle sidecar
 * megabytes); only tests drive etcd through it, as a client apart from ours.
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { moduleImports, sourceFiles, type ModuleImport } from '../support/module-imports.js';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));
const ETCD_DIR = join(SRC, 'etcd');

const isEtcd3 = (specifier: string): boolean => /^etcd3(?:\/|$)/.test(specifier);

/** Every reference to the etcd3 package in a module. */
const etcd3Imports = (fileName: string, text: string): ModuleImport[] => moduleImports(fileName, text).filter((i) => isEtcd3(i.specifier));

describe('the etcd boundary', () => {
  it('no module under src/ outside src/etcd imports etcd3 (not even its types)', async () => {
    const offenders: string[] = [];
    for (const file of await sourceFiles(SRC)) {
      if (!relative(ETCD_DIR, file).startsWith('..')) continue;
      for (const imp of etcd3Imports(file, await readFile(file, 'utf8'))) offenders.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
    }
    expect(offenders, 'take an EtcdClient (src/etcd/etcd-client.ts) instead').toEqual([]);
  });

  it('inside src/etcd, etcd3 is not imported either (the client speaks gRPC on node:http2 itself)', async () => {
    const found: string[] = [];
    for (const file of await sourceFiles(ETCD_DIR)) {
      for (const imp of etcd3Imports(file, await readFile(file, 'utf8'))) found.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
    }
    expect(found).toEqual([]);
  });

  it('the check sees every form an import can take, and nothing else', () => {
    const forms: Array<[string, Partial<ModuleImport>]> = [
      ["import { Etcd3 } from 'etcd3';", { typeOnly: false }],
      ["import type { Etcd3 } from 'etcd3';", { typeOnly: true }],
      ["import { type Etcd3 } from 'etcd3';", { typeOnly: false }],
      ['import {\n  Etcd3,\n  type IOptions,\n} from "etcd3";', { typeOnly: false, line: 1 }],
      ["import 'etcd3';", { typeOnly: false }],
      ["export { Etcd3 } from 'etcd3';", { typeOnly: false }],
      ["export type { IOptions } from 'etcd3';", { typeOnly: true }],
      ["const lib = await import('etcd3');", { typeOnly: false, dynamic: true }],
      ["type Lib = typeof import('etcd3');", { typeOnly: true }],
      ["const lib = require('etcd3');", { typeOnly: false, dynamic: false }],
      ["import { castGrpcError } from 'etcd3/lib/errors';", { typeOnly: false }],
    ];
    for (const [text, expected] of forms) {
      const found = etcd3Imports('x.ts', text);
      expect(found, text).toHaveLength(1);
      expect(found[0], text).toMatchObject(expected);
    }
    const unrelated = "import { x } from 'etcd3-other';\n// import { Etcd3 } from 'etcd3';\nconst s = \"from 'etcd3'\";\n";
    expect(etcd3Imports('x.ts', unrelated)).toEqual([]);
  });
});
