#!/usr/bin/env node
/**
 * Generates src/etcd/gen/ (TypeScript, by ts-proto) from etcd's .proto files in proto/ (etcd v3.5.16, kept as
 * upstream wrote them): `npm run proto`. With `--out=DIR` it writes there instead (the test that the checked-in
 * code is what the generator gives).
 *
 * ts-proto writes each message as a plain interface with its own encode and decode on the wire-format reader
 * and writer of @bufbuild/protobuf (`@bufbuild/protobuf/wire`): no descriptors are embedded or decoded at start
 * and no reflection runs per message (docs/design-decisions.md, "One etcd transport").
 *
 * Two steps between the upstream files and the generator:
 * - The gogoproto options (Go code generation) and google.api.http options (etcd's JSON gateway) are stripped,
 *   with their imports: they mean nothing to a TypeScript client, and vendoring gogo.proto and Google's API
 *   annotations only to have them ignored would put their descriptors into the generated code.
 * - Only the RPCs the project makes are generated (`buf generate --type`, methods listed below), with the
 *   messages they reach: rpc.proto has about 110 messages, a client that loads them all pays for their
 *   descriptors at start-up. A new call needs its method added here, then `npm run proto`.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PROTO = join(ROOT, 'proto');
const OUT = join(ROOT, 'src/etcd/gen');

/** The RPCs the project makes (fully qualified methods). */
export const METHODS = [
  'etcdserverpb.KV.Range',
  'etcdserverpb.KV.Put',
  'etcdserverpb.KV.Txn',
  'etcdserverpb.KV.Compact',
  'etcdserverpb.Watch.Watch',
  'etcdserverpb.Lease.LeaseGrant',
  'etcdserverpb.Lease.LeaseRevoke',
  'etcdserverpb.Lease.LeaseKeepAlive',
  'etcdserverpb.Lease.LeaseTimeToLive',
  'etcdserverpb.Cluster.MemberAdd',
  'etcdserverpb.Cluster.MemberRemove',
  'etcdserverpb.Cluster.MemberUpdate',
  'etcdserverpb.Cluster.MemberList',
  'etcdserverpb.Cluster.MemberPromote',
  'etcdserverpb.Maintenance.Alarm',
  'etcdserverpb.Maintenance.Status',
  'etcdserverpb.Maintenance.Defragment',
  'etcdserverpb.Maintenance.HashKV',
  'etcdserverpb.Maintenance.Snapshot',
  'etcdserverpb.Auth.Authenticate',
];

/**
 * ts-proto's options. Left at their defaults: `env` (both), so a bytes field decodes to a view of the message's
 * buffer (`env=node` would copy each into a Buffer: every watched key and value, every 32 KiB snapshot chunk),
 * and `outputTypeRegistry` (off).
 */
export const OPTIONS = [
  // etcd's ids and revisions are 64-bit, member ids span the whole uint64 range: bigint, never a lossy number.
  'forceLong=bigint',
  // Binary encode and decode only: no JSON methods, no create/fromPartial (a request is written as an object).
  'outputJsonMethods=false',
  'outputPartialMethods=false',
  // Every field optional in the types, so a request names only what it sets; a decoded message still has every
  // field (its default when absent on the wire).
  'useOptionals=all',
  // A table per service (its full name, each method's name and message codecs), from which src/etcd/methods.ts
  // makes the call paths; no client or server stubs.
  'outputServices=generic-definitions',
  // ES modules that Node resolves (NodeNext), under the file names the plugin before this one gave.
  'importSuffix=.js',
  'fileSuffix=_pb',
  'exportCommonSymbols=false',
];

/** An upstream .proto without its Go-generation and HTTP-gateway annotations. */
export function stripAnnotations(source) {
  return (
    source
      .replace(/^import "(gogoproto\/gogo|google\/api\/annotations)\.proto";\n/gm, '')
      .replace(/^option \(gogoproto\.[a-z_]+\) = [a-z]+;\n/gm, '')
      // An rpc's body is only its http option, whose value may nest one level (additional_bindings).
      .replace(/\{\s*option \(google\.api\.http\) = \{(?:[^{}]|\{[^{}]*\})*\};\s*\}/g, '{}')
      .replace(/ \[\(gogoproto\.[^\]]*\]/g, '')
  );
}

function filesUnder(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

export function generate(out = OUT) {
  const work = mkdtempSync(join(tmpdir(), 'gen-proto-'));
  try {
    const src = join(work, 'proto');
    for (const file of filesUnder(PROTO).filter((f) => f.endsWith('.proto'))) {
      const target = join(src, relative(PROTO, file));
      mkdirSync(dirname(target), { recursive: true });
      const stripped = stripAnnotations(readFileSync(file, 'utf8'));
      if (/gogoproto|google\.api/.test(stripped)) throw new Error(`${file}: annotations left after stripping`);
      writeFileSync(target, stripped);
    }
    writeFileSync(join(src, 'buf.yaml'), 'version: v2\n');
    const plugin = join(ROOT, 'node_modules/.bin/protoc-gen-ts_proto');
    writeFileSync(
      join(work, 'buf.gen.yaml'),
      [
        'version: v2',
        'plugins:',
        `  - local: ${JSON.stringify(plugin)}`,
        '    out: gen',
        '    opt:',
        ...OPTIONS.map((o) => `      - ${o}`),
        '',
      ].join('\n'),
    );
    const buf = join(ROOT, 'node_modules/.bin/buf');
    execFileSync(buf, ['generate', 'proto', '--template', 'buf.gen.yaml', ...METHODS.flatMap((m) => ['--type', m])], {
      cwd: work,
      stdio: 'inherit',
    });
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    cpSync(join(work, 'gen'), out, { recursive: true });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const outArg = process.argv.find((a) => a.startsWith('--out='));
  generate(outArg ? outArg.slice('--out='.length) : OUT);
}
