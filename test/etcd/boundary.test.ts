/**
 * src/etcd is the only door to etcd: no module outside it may import the etcd client library (they take an
 * EtcdClient), and inside it the library is imported for its types only, so that it is loaded (about
 * 200 ms) by client.ts's dynamic import when a command first talks to etcd, not by merely importing a module.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));
const ETCD_DIR = join(SRC, 'etcd');

interface Etcd3Import {
  /** 1-based line of the import. */
  line: number;
  text: string;
  /** Erased at compile time: `import type`, `export type … from`, or a type position's `import('etcd3')`. */
  typeOnly: boolean;
  /** `import('etcd3')` as an expression (loads the library when it runs, not when the module loads). */
  dynamic: boolean;
}

const isEtcd3 = (specifier: string): boolean => /^etcd3(?:\/|$)/.test(specifier);

/** Every reference to the etcd3 package in a module, read from its syntax tree (comments and strings do not count). */
function etcd3Imports(fileName: string, text: string): Etcd3Import[] {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const found: Etcd3Import[] = [];
  const add = (node: ts.Node, typeOnly: boolean, dynamic: boolean) =>
    found.push({ line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1, text: node.getText(sf).replace(/\s+/g, ' '), typeOnly, dynamic });
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier) && isEtcd3(node.moduleSpecifier.text)) {
      // `import { type X } from` still loads the module under verbatimModuleSyntax; only `import type` is erased.
      add(node, node.importClause?.isTypeOnly === true, false);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier) && isEtcd3(node.moduleSpecifier.text)) {
      add(node, node.isTypeOnly, false);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression) &&
      isEtcd3(node.moduleReference.expression.text)
    ) {
      add(node, node.isTypeOnly, false);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal) && isEtcd3(node.argument.literal.text)) {
      add(node, true, false);
    } else if (ts.isCallExpression(node) && node.arguments[0] && ts.isStringLiteral(node.arguments[0]) && isEtcd3(node.arguments[0].text)) {
      if (node.expression.kind === ts.SyntaxKind.ImportKeyword) add(node, false, true);
      else if (ts.isIdentifier(node.expression) && node.expression.text === 'require') add(node, false, false);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile() && /\.(?:ts|mts|cts|js|mjs)$/.test(e.name)).map((e) => join(e.parentPath, e.name));
}

describe('the etcd boundary', () => {
  it('no module under src/ outside src/etcd imports etcd3 (not even its types)', async () => {
    const offenders: string[] = [];
    for (const file of await sourceFiles(SRC)) {
      if (!relative(ETCD_DIR, file).startsWith('..')) continue;
      for (const imp of etcd3Imports(file, await readFile(file, 'utf8'))) offenders.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
    }
    expect(offenders, 'take an EtcdClient (src/etcd/etcd-client.ts) instead').toEqual([]);
  });

  it('inside src/etcd, etcd3 is imported for its types only, apart from dynamic imports in client.ts', async () => {
    const eager: string[] = [];
    for (const file of await sourceFiles(ETCD_DIR)) {
      const name = relative(ETCD_DIR, file);
      for (const imp of etcd3Imports(file, await readFile(file, 'utf8'))) {
        if (imp.typeOnly || (imp.dynamic && name === 'client.ts')) continue;
        eager.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
      }
    }
    expect(eager).toEqual([]);
  });

  it('the check sees every form an import can take, and nothing else', () => {
    const forms: Array<[string, Partial<Etcd3Import>]> = [
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
