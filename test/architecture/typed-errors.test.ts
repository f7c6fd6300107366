/**
 * Every error src/ throws carries a code (src/errors.ts): no bare `Error` is made, every error class derives
 * from CodedError, and nothing but errors is thrown. The snapstore package likewise: SnapStoreError for what
 * leaves it, InternalError (and its AbortError, TimeoutError) for what it wraps before. Read from each
 * module's syntax tree.
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { sourceFiles } from '../support/module-imports.js';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));
const SNAPSTORE_SRC = fileURLToPath(new URL('../../snapstore/src', import.meta.url));
/** The modules that define the base classes, the only places allowed to extend `Error`. */
const BASES = new Set([join(SRC, 'errors.ts'), join(SNAPSTORE_SRC, 'errors.ts'), join(SNAPSTORE_SRC, 'internal-errors.ts')]);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

async function offendersIn(dir: string): Promise<string[]> {
  const offenders: string[] = [];
  for (const file of await sourceFiles(dir)) {
    if (BASES.has(file)) continue;
    for (const o of uncodedErrors(file, await readFile(file, 'utf8'))) offenders.push(`${relative(ROOT, file)}:${o}`);
  }
  return offenders;
}

/** What in one module makes an error without a code: `new Error(…)`, `Error(…)`, `extends Error`, `throw <literal>`. */
export function uncodedErrors(fileName: string, text: string): string[] {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node, what: string) =>
    found.push(
      `${sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1}: ${what}: ${node.getText(sf).replace(/\s+/g, ' ').slice(0, 100)}`,
    );
  const isBareError = (e: ts.Expression) => ts.isIdentifier(e) && /^(?:Error|TypeError|RangeError)$/.test(e.text);
  const visit = (node: ts.Node): void => {
    if ((ts.isNewExpression(node) || ts.isCallExpression(node)) && isBareError(node.expression)) at(node, 'an error without a code');
    if (ts.isHeritageClause(node) && node.token === ts.SyntaxKind.ExtendsKeyword && node.types.some((t) => isBareError(t.expression)))
      at(node.parent, 'an error class not derived from CodedError');
    if (
      ts.isThrowStatement(node) &&
      (ts.isStringLiteral(node.expression) ||
        ts.isTemplateExpression(node.expression) ||
        ts.isNoSubstitutionTemplateLiteral(node.expression) ||
        ts.isObjectLiteralExpression(node.expression))
    )
      at(node, 'a thrown non-error');
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

describe('typed errors', () => {
  it('src/ makes no error without a code (src/errors.ts: CodedError, EtcdbrError, or the module’s own class)', async () => {
    expect(await offendersIn(SRC)).toEqual([]);
  });

  it('snapstore/src/ makes no error without a code (SnapStoreError, or InternalError and its subclasses)', async () => {
    expect(await offendersIn(SNAPSTORE_SRC)).toEqual([]);
  });

  it('the check sees each way of making an uncoded error, and passes coded ones', () => {
    expect(uncodedErrors('x.ts', "throw new Error('x');")).toHaveLength(1);
    expect(uncodedErrors('x.ts', "reject(Error('x'));")).toHaveLength(1);
    expect(uncodedErrors('x.ts', 'const e = new TypeError(`x`);')).toHaveLength(1);
    expect(uncodedErrors('x.ts', 'class A extends Error {}')).toHaveLength(1);
    expect(uncodedErrors('x.ts', "throw 'x';")).toHaveLength(1);
    expect(uncodedErrors('x.ts', 'throw `x ${y}`;')).toHaveLength(1);
    expect(
      uncodedErrors(
        'x.ts',
        "throw new EtcdbrError('E_FAILED', 'x');\nclass B extends CodedError {}\nthrow err;\n// new Error('in a comment')\nconst s = \"new Error('in a string')\";",
      ),
    ).toEqual([]);
  });
});
