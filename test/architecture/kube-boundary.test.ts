/**
 * src/k8s is the only door to Kubernetes: no module outside it may import @kubernetes/client-node (they take a
 * KubeClient and call src/k8s), and inside it the library is imported for its types only, apart from the one
 * dynamic import in library.ts. The library and its dependencies hold about 85 MB of memory: it must load when a
 * Kubernetes feature is switched on, never because a module was imported (test/cli/module-load.test.ts checks
 * the running server).
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { moduleImports, sourceFiles, type ModuleImport } from '../support/module-imports.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SRC = join(ROOT, 'src');
const K8S_DIR = join(SRC, 'k8s');

const isKubeClientLibrary = (specifier: string): boolean => /^@kubernetes\/client-node(?:\/|$)/.test(specifier);

const kubeImports = (fileName: string, text: string): ModuleImport[] =>
  moduleImports(fileName, text).filter((i) => isKubeClientLibrary(i.specifier));

describe('the Kubernetes boundary', () => {
  it('no module under src/ or snapstore/src outside src/k8s imports @kubernetes/client-node (not even its types)', async () => {
    const offenders: string[] = [];
    for (const file of [...(await sourceFiles(SRC)), ...(await sourceFiles(join(ROOT, 'snapstore', 'src')))]) {
      if (!relative(K8S_DIR, file).startsWith('..')) continue;
      for (const imp of kubeImports(file, await readFile(file, 'utf8'))) offenders.push(`${relative(ROOT, file)}:${imp.line}: ${imp.text}`);
    }
    expect(offenders, 'take a KubeClient and call src/k8s instead').toEqual([]);
  });

  it('inside src/k8s, @kubernetes/client-node is imported for its types only, apart from the dynamic import in library.ts', async () => {
    const eager: string[] = [];
    let dynamicInLibrary = 0;
    for (const file of await sourceFiles(K8S_DIR)) {
      const name = relative(K8S_DIR, file);
      for (const imp of kubeImports(file, await readFile(file, 'utf8'))) {
        if (imp.typeOnly) continue;
        if (imp.dynamic && name === 'library.ts') {
          dynamicInLibrary++;
          continue;
        }
        eager.push(`${relative(SRC, file)}:${imp.line}: ${imp.text}`);
      }
    }
    expect(eager, 'use library.ts (loadKubeLibrary / kubeLibrary) for values').toEqual([]);
    // The rule above holds trivially if the library were not used at all; the loader must still be the door.
    expect(dynamicInLibrary).toBe(1);
  });

  it('the check sees every form an import can take, and nothing else', () => {
    const forms: Array<[string, Partial<ModuleImport>]> = [
      ["import { KubeConfig } from '@kubernetes/client-node';", { typeOnly: false }],
      ["import type { V1Lease } from '@kubernetes/client-node';", { typeOnly: true }],
      ["import { type V1Lease } from '@kubernetes/client-node';", { typeOnly: false }],
      ["export { KubeConfig } from '@kubernetes/client-node';", { typeOnly: false }],
      ["const lib = await import('@kubernetes/client-node');", { typeOnly: false, dynamic: true }],
      ["type Lib = typeof import('@kubernetes/client-node');", { typeOnly: true }],
      ["const lib = require('@kubernetes/client-node');", { typeOnly: false, dynamic: false }],
      ["import { ApiException } from '@kubernetes/client-node/dist/gen/apis/exception.js';", { typeOnly: false }],
    ];
    for (const [text, expected] of forms) {
      const found = kubeImports('x.ts', text);
      expect(found, text).toHaveLength(1);
      expect(found[0], text).toMatchObject(expected);
    }
    expect(kubeImports('x.ts', "import { x } from '@kubernetes/client-node-extra';\n// import '@kubernetes/client-node';\n")).toEqual([]);
  });
});
