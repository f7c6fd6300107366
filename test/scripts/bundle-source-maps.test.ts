/**
 * The bundled CLI (scripts/build.mjs) is printed without whitespace, so a stack trace's line numbers say
 * nothing by themselves; each chunk links its source map, and with `--enable-source-maps` a stack trace names
 * the TypeScript file and line. Checked on the chunk that holds src/config/values.ts: a bad duration throws
 * there, in a child process with and without the flag.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The output of the bundle that holds `module` (a path under dist/), by the build's meta file. */
function chunkOf(module: string): string {
  const chunks = JSON.parse(readFileSync(join(ROOT, 'dist', 'etcdbrctl.meta.json'), 'utf8')) as Record<string, string[]>;
  const found = Object.entries(chunks).find(([, inputs]) => inputs.includes(module));
  if (found === undefined) throw new Error(`no chunk of dist/etcdbrctl.meta.json holds ${module}`);
  return join(ROOT, 'dist', found[0]);
}

/** The first frames of the stack of parseGoDuration('bogus'), called from the bundle's chunk. */
function stackOfBadDuration(nodeFlags: string[]): string {
  const probe = `
    const { parseGoDuration } = await import(${JSON.stringify(pathToFileURL(chunkOf('dist/config/values.js')).href)});
    try { parseGoDuration('bogus'); } catch (err) { console.log(err.stack.split('\\n').slice(0, 3).join('\\n')); }`;
  return execFileSync(process.execPath, [...nodeFlags, '--input-type=module', '-e', probe], { encoding: 'utf8' });
}

describe('the bundle and its source maps', () => {
  it('is printed without whitespace: its frames name the chunk, line and column', () => {
    const stack = stackOfBadDuration([]);
    expect(stack).toMatch(/time: invalid duration "bogus"/);
    expect(stack).toMatch(/dist\/etcdbrctl-chunk-[A-Z0-9]+\.js:\d+:\d+/);
    expect(stack).not.toMatch(/\.ts:/);
    // The banner (two lines), the code, the source map's link.
    expect(readFileSync(chunkOf('dist/config/values.js'), 'utf8').trimEnd().split('\n').length).toBeLessThanOrEqual(4);
  });

  it('with --enable-source-maps, the frames name the TypeScript source and line', () => {
    const stack = stackOfBadDuration(['--enable-source-maps']);
    expect(stack).toMatch(/time: invalid duration "bogus"/);
    expect(stack).toMatch(/src\/config\/values\.ts:\d+:\d+/);
  });
});
