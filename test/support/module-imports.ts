/**
 * Every module a source file refers to, read from its syntax tree (comments and strings do not count): the
 * architecture tests (the etcd boundary, the layer order) are built on it.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import ts from 'typescript';

export interface ModuleImport {
  specifier: string;
  /** 1-based line of the import. */
  line: number;
  text: string;
  /** Erased at compile time: `import type`, `export type … from`, or a type position's `import('x')`. */
  typeOnly: boolean;
  /** `import('x')` as an expression (loads the module when it runs, not when the importer loads). */
  dynamic: boolean;
}

export function moduleImports(fileName: string, text: string): ModuleImport[] {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const found: ModuleImport[] = [];
  const add = (node: ts.Node, specifier: string, typeOnly: boolean, dynamic: boolean) =>
    found.push({
      specifier,
      line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1,
      text: node.getText(sf).replace(/\s+/g, ' '),
      typeOnly,
      dynamic,
    });
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      // `import { type X } from` still loads the module under verbatimModuleSyntax; only `import type` is erased.
      add(node, node.moduleSpecifier.text, node.importClause?.isTypeOnly === true, false);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node, node.moduleSpecifier.text, node.isTypeOnly, false);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      add(node, node.moduleReference.expression.text, node.isTypeOnly, false);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      add(node, node.argument.literal.text, true, false);
    } else if (ts.isCallExpression(node) && node.arguments[0] && ts.isStringLiteral(node.arguments[0])) {
      if (node.expression.kind === ts.SyntaxKind.ImportKeyword) add(node, node.arguments[0].text, false, true);
      else if (ts.isIdentifier(node.expression) && node.expression.text === 'require') add(node, node.arguments[0].text, false, false);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

/** The TypeScript and JavaScript sources under `dir`, recursively. */
export async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile() && /\.(?:ts|mts|cts|js|mjs)$/.test(e.name)).map((e) => join(e.parentPath, e.name));
}
