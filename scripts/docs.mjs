#!/usr/bin/env node
// `npm run docs`: regenerates the generated parts of docs/ from the compiled sources (dist/, built by
// `npm run build`), currently docs/reference/flags.md.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { renderFlagReference } = await import(join(root, 'dist', 'cli', 'reference.js'));
const file = join(root, 'docs', 'reference', 'flags.md');
mkdirSync(dirname(file), { recursive: true });
writeFileSync(file, renderFlagReference());
console.log(`wrote ${file}`);
