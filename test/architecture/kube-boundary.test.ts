/**
 * src/k8s is the only module that talks HTTP to Kubernetes: its own REST client (http.ts, built by client.ts)
 * is imported nowhere else, and no source outside it spells a Kubernetes API path; everything else takes a
 * KubeClient and calls src/k8s. `@kubernetes/client-node` and what it pulls in held about 40 MB of an idle
 * sidecar (issue 24): it is no dependency any more and nothing may import it again (e2e/module-load.test.ts
 * checks the running server).
 */
import { readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { moduleImports, sourceFiles, type ModuleImport } from '../support/module-imports.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SRC = join(ROOT, 'src');
const K8S_DIR = join(SRC, 'k8s');

const isKubeClientLibrary = (specifier: string): boolean => /^@kubernetes\/client-node(?:\/|$)/.test(specifier);

const kubeImports = (fileName: string, text: string): ModuleImport[] =>
  moduleImports(fileName, text).filter((i) => isKubeClientLibrary(i.specifier));

/** Our transport and kubeconfig reader (resolved from the importing file): only src/k8s may import them. */
const TRANSPORT = ['http', 'kubeconfig'].map((m) => join(K8S_DIR, `${m}.js`));
const isKubeTransport = (file: string, specifier: string): boolean =>
  specifier.startsWith('.') && TRANSPORT.includes(resolve(dirname(file), specifier));

const outsideK8s = (file: string): boolean => relative(K8S_DIR, file).startsWith('..');

async function productionSources(): Promise<string[]> {
  return [...(await sourceFiles(SRC)), ...(await sourceFiles(join(ROOT, 'snapstore', 'src')))];
}

describe('the Kubernetes boundary', () => {
  it('no module under src/, snapstore/, test/, e2e/ or bench/ imports @kubernetes/client-node (not even its types)', async () => {
    const offenders: string[] = [];
    const dirs = ['src', 'snapstore', 'test', 'e2e', 'bench'].map((d) => join(ROOT, d));
    for (const d of dirs) {
      for (const file of await sourceFiles(d).catch(() => [])) {
        if (file.includes('/node_modules/')) continue;
        for (const imp of kubeImports(file, await readFile(file, 'utf8')))
          offenders.push(`${relative(ROOT, file)}:${imp.line}: ${imp.text}`);
      }
    }
    expect(offenders, 'src/k8s has its own REST client').toEqual([]);
  });

  it('outside src/k8s no module imports the Kubernetes transport or spells a Kubernetes API path', async () => {
    const offenders: string[] = [];
    let insideUses = 0;
    for (const file of await productionSources()) {
      const text = await readFile(file, 'utf8');
      const transport = moduleImports(file, text).filter((i) => isKubeTransport(file, i.specifier) && !i.typeOnly);
      if (!outsideK8s(file)) {
        insideUses += transport.length;
        continue;
      }
      for (const imp of transport) offenders.push(`${relative(ROOT, file)}:${imp.line}: ${imp.text}`);
      for (const m of text.matchAll(/['"`]\/apis?\/(?:v1\b|coordination\.k8s\.io|druid\.gardener\.cloud)/g)) {
        offenders.push(`${relative(ROOT, file)}: Kubernetes API path ${m[0]}`);
      }
    }
    expect(offenders, 'take a KubeClient and call src/k8s instead').toEqual([]);
    // The rule above holds trivially if nothing used the transport: client.ts must still be its door.
    expect(insideUses).toBeGreaterThan(0);
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
