#!/usr/bin/env node
// `npm run build`: compiles src/ and snapstore/src/ to dist/ (tsc -b tsconfig.build.json), then bundles the CLI
// from dist/ into dist/etcdbrctl.js and its chunks dist/etcdbrctl-*.js, which bin/etcdbrctl loads.
//
// Why a bundle: a short command such as a restore of a few thousand revisions is mostly process start, and
// that was mostly loading ~150 ES modules one by one (resolving each specifier, a package.json lookup, a stat,
// a read, a link) plus pino's CommonJS files. The bundle holds our modules, the snapstore workspace package
// and the packages in BUNDLED_PACKAGES below with their dependencies; code splitting keeps every dynamic
// import() a chunk of its own, so a command still loads only what it uses (e2e/module-load.test.ts checks it
// through dist/etcdbrctl.meta.json, which names the modules in each chunk). Every other package (the cloud
// SDKs, the addons) stays in node_modules and loads as before, when used. bin/etcdbrctl falls back to
// dist/cli/main.js when the bundle is missing or older than the last tsc build, so a bare `tsc -b` never
// leaves it running stale code.
//
//   node scripts/build.mjs [--no-tsc]
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, transform } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');

/**
 * Packages bundled besides our own, with everything they require: pino (CommonJS, loaded at every start),
 * prom-client (CommonJS, loaded by every sidecar), yaml (CommonJS, 74 modules, a chunk of its own loaded on
 * first use: src/encoding/yaml.ts) and @bufbuild/protobuf. The generated etcd code imports only
 * the latter's `wire` reader and writer, but that entry also re-exports size-delimited.js, which brings the
 * reflection API: 19 of the package's modules loaded unbundled, 4 bundled (esbuild keeps what is used of a
 * package marked free of side effects).
 */
const BUNDLED_PACKAGES = ['@etcdbrctl/snapstore', 'pino', 'prom-client', 'yaml', '@bufbuild/protobuf'];

/** Dependencies of bundled packages that load only when first used: the package, and what stands in for it. */
const ON_DEMAND = new Map([['@opentelemetry/api', join(root, 'scripts', 'on-demand', 'opentelemetry-api.cjs')]]);

/** `names` and every package they depend on, as installed at the root (the way npm hoists them). */
function dependencyClosure(names) {
  const seen = new Set();
  const todo = [...names];
  while (todo.length > 0) {
    const name = todo.pop();
    if (seen.has(name)) continue;
    seen.add(name);
    const manifest = join(root, 'node_modules', name, 'package.json');
    if (!existsSync(manifest)) continue;
    todo.push(...Object.keys(JSON.parse(readFileSync(manifest, 'utf8')).dependencies ?? {}));
  }
  return seen;
}

function tsc() {
  // TypeScript 7's native tsc (package.json's @typescript/native).
  const bin = join(root, 'node_modules', '@typescript', 'native', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [bin, '-b', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) {
    console.error('build: the TypeScript build failed (see above)');
    process.exit(1);
  }
}

const NON_ASCII = /[\u0080-\uffff]/;

/**
 * An output's text with every character ASCII. V8 keeps a module's source text for as long as the module lives
 * (its functions compile lazily from it) as one string: a byte a character, or two as soon as one character
 * lies beyond Latin-1. esbuild escapes such characters in strings, templates, regular expressions and names (its
 * default charset, `ascii`), but copies the comments it keeps (class members' doc comments) as written: one '→'
 * or '—' there made the 135 KB server chunk a 270 KB string, and an idle `server` held ~0.24 MiB more for three
 * such chunks. Escaped (`\u2192`), they read the same and the chunk stays a byte a character. Comments must be
 * all that esbuild left unescaped, or the escaping could change code (a tagged template's raw text, a regular
 * expression with the `u` flag): checked by printing the output again without its comments (esbuild's whitespace
 * minifier drops them, legal ones too when told), which must come out ASCII.
 */
async function asciiOnly(file) {
  const text = file.text;
  if (!NON_ASCII.test(text)) return text;
  const { code } = await transform(text, { minifyWhitespace: true, legalComments: 'none', format: 'esm' });
  if (NON_ASCII.test(code)) throw new Error(`build: ${file.path} has a character beyond ASCII outside its comments`);
  return text.replace(new RegExp(NON_ASCII, 'g'), (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Fails the build when esbuild renamed an error class: `class FooError2` to keep it apart from another module's
 * `FooError`, or `var FooError = class _FooError` for a class with static members. pino logs an error's class
 * name as its `type`, which would then read `FooError2` or `_FooError`. Other renamed classes and functions
 * are let be (their names show only in stack traces).
 */
function classesKeptTheirNames(files) {
  const renamed = new Set();
  for (const f of files) {
    for (const m of f.text.matchAll(/\bclass ([A-Za-z_$][\w$]*)/g)) {
      const written = m[1].replace(/^_/, '').replace(/\d+$/, '');
      if (written !== m[1] && /Error$/.test(written)) renamed.add(m[1]);
    }
  }
  if (renamed.size > 0) {
    throw new Error(
      `build: esbuild renamed error class(es) ${[...renamed].join(', ')}: give each a name no other module uses and no static members`,
    );
  }
}

async function bundle() {
  // The snapstore package's own dependencies (the SDKs) stay external: only its code is bundled.
  const bundled = new Set([BUNDLED_PACKAGES[0], ...dependencyClosure(BUNDLED_PACKAGES.slice(1))].filter((p) => !ON_DEMAND.has(p)));
  const standIns = new Set(ON_DEMAND.values());
  const packageOf = (spec) => (spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);
  const result = await build({
    absWorkingDir: root,
    entryPoints: { etcdbrctl: join(dist, 'cli', 'main.js') },
    outdir: dist,
    // Flat in dist/, beside the compiled tree: a module's `new URL('../package.json', import.meta.url)`
    // (version.ts) still finds the project's package.json.
    entryNames: '[name]',
    chunkNames: 'etcdbrctl-[name]-[hash]',
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node22.12',
    // Whitespace and comments out: V8 keeps the source text of every module it loaded for as long as the
    // process runs (its functions compile lazily from it): the chunks an idle sidecar loads (Local store) are
    // 0.76 MB, 1.06 MB with whitespace (the generated protobuf code's 101 KB, 153 KB). Names stay as written (no
    // renaming: stack traces and pino's error `type` read as before); line numbers go, so each chunk links
    // its source map (dist/*.js.map, to src/*.ts through tsc's maps): with NODE_OPTIONS=--enable-source-maps
    // a stack trace names the TypeScript file and line. Node reads the maps only with that flag.
    minifyWhitespace: true,
    sourcemap: 'linked',
    sourcesContent: false,
    // No keepNames: it wraps every function and class in a naming call, which turned each into an object with
    // a property table of its own (0.5 MB of an idle sidecar's heap) and cost a closure created per call its
    // naming (4 % of delta capture). Without it esbuild renames what collides across modules and names a class
    // with static members `_Name`; error classes must keep their names (pino logs an error's class as its
    // `type`): checked below (classesKeptTheirNames).
    // The compiled package, not its TypeScript sources (the "development" condition).
    conditions: [],
    // pino is CommonJS: its require() of Node's modules needs a real require in an ES module.
    banner: {
      js: "import { createRequire as __etcdbrctlCreateRequire } from 'node:module';\nconst require = __etcdbrctlCreateRequire(import.meta.url);",
    },
    metafile: true,
    write: false,
    logLevel: 'warning',
    plugins: [
      {
        name: 'packages-external-but-bundled',
        setup(b) {
          b.onResolve({ filter: /^[^./]/ }, (a) => {
            if (a.path.startsWith('node:')) return { path: a.path, external: true };
            // A bundled package's import of an on-demand one gets its stand-in; the stand-in's own (on first
            // use) stays a require of the installed package.
            const standIn = ON_DEMAND.get(a.path);
            if (standIn !== undefined) return standIns.has(a.importer) ? { path: a.path, external: true } : { path: standIn };
            return bundled.has(packageOf(a.path)) ? undefined : { path: a.path, external: true };
          });
        },
      },
    ],
  });
  // Which source modules each output holds (paths relative to the project), for the module-load test.
  const chunks = Object.fromEntries(
    Object.entries(result.metafile.outputs)
      .filter(([out]) => !out.endsWith('.map'))
      .map(([out, o]) => [out.replace(/^dist\//, ''), Object.keys(o.inputs).sort()]),
  );
  // A CLI started while this runs (a test worker, a second build) finds a complete bundle, old or new: the
  // chunks (named by their content) first, each file renamed into place, the entry last, then the old chunks go.
  const entry = join(dist, 'etcdbrctl.js');
  const files = [...result.outputFiles].sort((a, b) => (a.path === entry) - (b.path === entry));
  const place = (path, contents) => {
    writeFileSync(`${path}.tmp`, contents);
    renameSync(`${path}.tmp`, path);
  };
  const isMap = (f) => f.path.endsWith('.map');
  classesKeptTheirNames(files.filter((f) => !isMap(f)));
  const texts = await Promise.all(files.map((f) => (isMap(f) ? f.text : asciiOnly(f))));
  files.forEach((f, i) => place(f.path, texts[i]));
  place(join(dist, 'etcdbrctl.meta.json'), `${JSON.stringify(chunks, null, 1)}\n`);
  const current = new Set([...files.map((f) => basename(f.path)), 'etcdbrctl.meta.json']);
  for (const name of readdirSync(dist)) if (/^etcdbrctl[.-]/.test(name) && !current.has(name)) rmSync(join(dist, name), { force: true });
}

if (!process.argv.includes('--no-tsc')) tsc();
await bundle();
