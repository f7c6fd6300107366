/**
 * etcd's backend schema is declared once, in src/backend/schema.ts (docs/architecture.md "Layers"): src/bbolt stays a generic
 * bbolt reader, writer and checker, and no other module spells a bucket or meta key of etcd's. Comments may
 * name them; code takes the constants.
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { sourceFiles } from '../support/module-imports.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SCHEMA = join(ROOT, 'src', 'backend', 'schema.ts');

/** Keys only etcd's schema has: found anywhere as a string literal. */
const DISTINCT =
  /(['"`])(finishedCompactRev|scheduledCompactRev|consistent_index|authEnabled|authRevision|members_removed|authUsers|authRoles|storageVersion|confState)\1/g;
/** Short bucket names are ordinary words elsewhere: found where they name a bucket or a bucket key. */
const BUCKET_USE =
  /(?:Buffer\.from|constantBytes|\.bucket|bucketNamed)\(\s*(['"`])(key|meta|auth|lease|members|cluster|alarm)\1|(['"`])(key|meta)\3\s*\|\s*(['"`])(key|meta)\5/g;

/** The text with comments blanked out (line structure kept), so comments may name what they explain. */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' ')).replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

function spellings(text: string): string[] {
  const body = code(text);
  return [...body.matchAll(DISTINCT), ...body.matchAll(BUCKET_USE)].map((m) => m[0]);
}

describe("etcd's schema in one module", () => {
  it('no module under src/ or snapstore/src/ spells a bucket or meta key of etcd outside src/backend/schema.ts', async () => {
    const offenders: string[] = [];
    const files = [...(await sourceFiles(join(ROOT, 'src'))), ...(await sourceFiles(join(ROOT, 'snapstore', 'src')))];
    for (const file of files) {
      if (file === SCHEMA) continue;
      for (const s of spellings(await readFile(file, 'utf8'))) offenders.push(`${relative(ROOT, file)}: ${s}`);
    }
    expect(offenders, 'import the name from src/backend/schema.ts').toEqual([]);
  });

  it('the search finds the names where they are declared (so it can fail), and not in comments', async () => {
    const found = spellings(await readFile(SCHEMA, 'utf8'));
    expect(found).toEqual(
      expect.arrayContaining([
        "constantBytes('key'",
        "constantBytes('meta'",
        "constantBytes('auth'",
        "'finishedCompactRev'",
        "'authEnabled'",
      ]),
    );
    expect(spellings("const x = 1; // bucket('key') and 'finishedCompactRev'\n/* Buffer.from('meta') */")).toEqual([]);
    expect(spellings("type T = 'key' | 'meta';")).toEqual(["'key' | 'meta'"]);
    expect(spellings("const k = Buffer.from('key');")).toEqual(["Buffer.from('key'"]);
  });
});
