/**
 * Layers that only point down (docs/architecture.md "Layers"): a module may import from its own layer's folders or
 * from the layers below, never from a layer above, and the folders form no cycle. Read from each module's
 * syntax tree; type-only imports count too (they are dependencies of the design even though erased).
 */
import { readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { moduleImports, sourceFiles } from '../support/module-imports.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SRC = join(ROOT, 'src');
const SNAPSTORE_SRC = join(ROOT, 'snapstore', 'src');

/** Top to bottom. `.` is the modules directly in src/ (clock, log, metrics, version). */
const LAYERS: ReadonlyArray<{ name: string; folders: readonly string[] }> = [
  { name: 'command line', folders: ['cli'] },
  { name: 'server', folders: ['server'] },
  { name: 'domain', folders: ['compactor', 'copier', 'verifier', 'cluster', 'initializer', 'snapshotter', 'restorer'] },
  { name: 'configuration', folders: ['config'] },
  { name: 'etcd backend', folders: ['backend'] },
  { name: 'infrastructure', folders: ['etcd', 'k8s', 'bbolt', 'wal', 'backup'] },
  { name: 'encoding', folders: ['encoding'] },
  { name: 'base', folders: ['.'] },
];

const layerOf = new Map(LAYERS.flatMap((l, rank) => l.folders.map((f) => [f, rank] as const)));

/** The folder of src/ a file lives in ('.' directly in src/). */
const folderOf = (file: string): string => {
  const parts = relative(SRC, file).split(sep);
  return parts.length > 1 ? (parts[0] as string) : '.';
};

interface Edge {
  from: string;
  to: string;
  where: string;
}

/** Edges between src/ folders, one per import that crosses folders. */
async function folderEdges(): Promise<Edge[]> {
  const edges: Edge[] = [];
  for (const file of await sourceFiles(SRC)) {
    for (const imp of moduleImports(file, await readFile(file, 'utf8'))) {
      if (!imp.specifier.startsWith('.')) continue;
      const target = resolve(dirname(file), imp.specifier);
      if (relative(SRC, target).startsWith('..')) continue;
      const from = folderOf(file);
      const to = folderOf(target);
      if (from !== to) edges.push({ from, to, where: `${relative(SRC, file)}:${imp.line}: ${imp.text}` });
    }
  }
  return edges;
}

/** One cycle of the directed graph, as a path that ends where it starts; undefined when there is none. */
export function findCycle(edges: ReadonlyArray<{ from: string; to: string }>): string[] | undefined {
  const next = new Map<string, Set<string>>();
  for (const e of edges) (next.get(e.from) ?? next.set(e.from, new Set()).get(e.from)!).add(e.to);
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (node: string): string[] | undefined => {
    if (state.get(node) === 'done') return undefined;
    if (state.get(node) === 'open') return [...path.slice(path.indexOf(node)), node];
    state.set(node, 'open');
    path.push(node);
    for (const n of [...(next.get(node) ?? [])].sort()) {
      const cycle = visit(n);
      if (cycle) return cycle;
    }
    path.pop();
    state.set(node, 'done');
    return undefined;
  };
  for (const node of [...next.keys()].sort()) {
    const cycle = visit(node);
    if (cycle) return cycle;
  }
  return undefined;
}

describe('layers that only point down', () => {
  it('every folder of src/ has its place in the layer table', async () => {
    const folders = new Set((await sourceFiles(SRC)).map(folderOf));
    expect(
      [...folders].filter((f) => !layerOf.has(f)).sort(),
      'add the new folder to LAYERS (and the diagrams in README.md and docs/architecture.md)',
    ).toEqual([]);
  });

  it('no import points to a higher layer', async () => {
    const upward = (await folderEdges())
      .filter((e) => (layerOf.get(e.to) ?? -1) < (layerOf.get(e.from) ?? -1))
      .map((e) => `${e.where}  (${LAYERS[layerOf.get(e.from)!]!.name} → ${LAYERS[layerOf.get(e.to)!]!.name})`);
    expect(upward).toEqual([]);
  });

  it('the folders form no cycle', async () => {
    const edges = await folderEdges();
    const cycle = findCycle(edges);
    const evidence = cycle?.slice(1).map((to, i) => edges.find((e) => e.from === cycle[i] && e.to === to)!.where);
    expect(cycle && { cycle: cycle.join(' → '), imports: evidence }).toBeUndefined();
  });

  it('the modules form no cycle either (src/ and snapstore/src, type-only imports included)', async () => {
    for (const root of [SRC, SNAPSTORE_SRC]) {
      const edges = await moduleEdges(root);
      const cycle = findCycle(edges);
      const evidence = cycle?.slice(1).map((to, i) => edges.find((e) => e.from === cycle[i] && e.to === to)!.where);
      expect(cycle && { cycle: cycle.join(' → '), imports: evidence }).toBeUndefined();
    }
  });

  it('the snapstore package stands alone: nothing of it reaches into src/', async () => {
    const outside: string[] = [];
    for (const file of await sourceFiles(SNAPSTORE_SRC)) {
      for (const imp of moduleImports(file, await readFile(file, 'utf8'))) {
        const escapes = imp.specifier.startsWith('.') && relative(SNAPSTORE_SRC, resolve(dirname(file), imp.specifier)).startsWith('..');
        if (escapes || imp.specifier === 'etcdbrctl' || imp.specifier.startsWith('etcdbrctl/'))
          outside.push(`${relative(ROOT, file)}:${imp.line}: ${imp.text}`);
      }
    }
    expect(outside).toEqual([]);
  });

  it('the cycle check finds cycles, long and short, and passes a layered graph', () => {
    const e = (from: string, to: string) => ({ from, to });
    expect(findCycle([e('a', 'b'), e('b', 'c'), e('a', 'c')])).toBeUndefined();
    expect(findCycle([e('a', 'b'), e('b', 'a')])).toEqual(['a', 'b', 'a']);
    expect(findCycle([e('x', 'a'), e('a', 'b'), e('b', 'c'), e('c', 'a')])).toEqual(['a', 'b', 'c', 'a']);
  });
});

/** Edges between the modules under `root`, one per relative import of a module there (`.js` names the `.ts` source). */
async function moduleEdges(root: string): Promise<Edge[]> {
  const edges: Edge[] = [];
  for (const file of await sourceFiles(root)) {
    for (const imp of moduleImports(file, await readFile(file, 'utf8'))) {
      if (!imp.specifier.startsWith('.')) continue;
      const target = resolve(dirname(file), imp.specifier).replace(/\.js$/, '.ts');
      if (relative(root, target).startsWith('..')) continue;
      edges.push({ from: relative(root, file), to: relative(root, target), where: `${relative(root, file)}:${imp.line}: ${imp.text}` });
    }
  }
  return edges;
}
