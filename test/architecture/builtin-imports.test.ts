/**
 * `node:http` and `node:https` reach ES modules only through snapstore/src/node-http.ts, which requires them:
 * an ES module import of `node:http` makes Node read every export of it for the module's facade, and three of
 * those exports load Node's bundled undici (about 12 MiB in a bare Node 24) into every sidecar. Type-only
 * imports are erased and allowed. e2e/module-load.test.ts checks the running server for undici.
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { moduleImports, sourceFiles } from '../support/module-imports.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const THE_DOOR = join(ROOT, 'snapstore', 'src', 'node-http.ts');
const HTTP_BUILTINS = new Set(['node:http', 'http', 'node:https', 'https']);

describe('Node HTTP builtins', () => {
  it('only snapstore/src/node-http.ts loads node:http or node:https; other modules import their types at most', async () => {
    const offenders: string[] = [];
    let doorLoads = 0;
    for (const dir of ['src', join('snapstore', 'src')]) {
      for (const file of await sourceFiles(join(ROOT, dir))) {
        const loads = moduleImports(file, await readFile(file, 'utf8')).filter((i) => HTTP_BUILTINS.has(i.specifier) && !i.typeOnly);
        if (file === THE_DOOR) {
          // Its two loads are requires, never imports.
          doorLoads = loads.filter((i) => i.text.startsWith('require(')).length;
          if (doorLoads === loads.length) continue;
        }
        for (const imp of loads) offenders.push(`${relative(ROOT, file)}:${imp.line}: ${imp.text}`);
      }
    }
    expect(offenders, 'use nodeHttp / nodeHttps from @etcdbrctl/snapstore').toEqual([]);
    expect(doorLoads).toBe(2);
  });
});
