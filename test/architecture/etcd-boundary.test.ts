/**
 * src/etcd is the only door to etcd: no module outside it may import an etcd client library (they take an
 * EtcdClient), and inside it neither the etcd3 library nor a gRPC library is used (etcd3's gRPC stack cost the
 * idle sidecar megabytes; our transport is src/etcd/grpc.ts); only tests drive etcd through etcd3, as a client
 * apart from ours. The door is src/etcd/index.ts: no module outside src/etcd imports one behind it.
 */
import { readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
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
    expect(offenders, 'take an EtcdClient (src/etcd/index.ts) instead').toEqual([]);
  });

  it('inside src/etcd, etcd3 is not imported either (the client speaks gRPC on node:http2 itself)', async () => {
    const found: string[] = [];
    for (const file of await sourceFiles(ETCD_DIR)) {
      for (const imp of etcd3Imports(file, await readFile(file, 'utf8'))) found.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
    }
    expect(found).toEqual([]);
  });

  // The generated code's runtime is @bufbuild/protobuf's wire-format reader and writer; the package's main entry
  // is its reflection runtime (descriptors decoded at start, create/toBinary/fromBinary on them), which the idle
  // sidecar paid megabytes for (docs/design-decisions.md, "One etcd transport").
  it("no module under src/ imports a gRPC or protobuf library other than the generated code's runtime (@bufbuild/protobuf/wire)", async () => {
    const found: string[] = [];
    for (const file of await sourceFiles(SRC)) {
      for (const imp of moduleImports(file, await readFile(file, 'utf8'))) {
        if (/^(@grpc\/|protobufjs|google-protobuf|ts-proto|@bufbuild\/(?!protobuf\/wire$))/.test(imp.specifier))
          found.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
      }
    }
    expect(found).toEqual([]);
  });

  it('outside src/etcd, modules reach it through its door (index.ts) only', async () => {
    const offenders: string[] = [];
    for (const file of await sourceFiles(SRC)) {
      if (!relative(ETCD_DIR, file).startsWith('..')) continue;
      for (const imp of moduleImports(file, await readFile(file, 'utf8'))) {
        if (!imp.specifier.startsWith('.')) continue;
        const target = resolve(dirname(file), imp.specifier);
        if (!relative(ETCD_DIR, target).startsWith('..') && target !== join(ETCD_DIR, 'index.js')) {
          offenders.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
        }
      }
    }
    expect(offenders, 'import from src/etcd/index.js').toEqual([]);
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
