#!/usr/bin/env node
// `npm run docs`: regenerates the generated parts of docs/ from the compiled sources (dist/, built by
// `npm run build`): docs/reference/flags.md and docs/reference/metrics.md.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { renderFlagReference, renderMetricsReference } = await import(join(root, 'dist', 'cli', 'reference.js'));
for (const [name, render] of [
  ['flags.md', renderFlagReference],
  ['metrics.md', renderMetricsReference],
]) {
  const file = join(root, 'docs', 'reference', name);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, render());
  console.log(`wrote ${file}`);
}
