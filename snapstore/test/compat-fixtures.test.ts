/**
 * Every snapshot file written by upstream etcd-backup-restore v0.23 (Go) in the compat fixtures decodes with our
 * codecs to a payload of the documented shape and size, and our LZW encoder re-creates the `.Z` files bit for bit.
 * Names are parsed by hand here on purpose, so this test does not lean on the snapshot-name code it helps verify.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Transform } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createCompressStream, createDecompressStream } from '../src/codec.js';
import { UPSTREAM_V023 } from '../../test/support/fixtures.js';

const COMPAT_ROOT = UPSTREAM_V023;

interface FixtureFile {
  caseName: string;
  /** `v2/<name>` as listed in workload.md. */
  relPath: string;
  path: string;
  name: string;
  kind: 'Full' | 'Incr';
  suffix: string;
}

interface TableRow {
  size: number;
  kind: string;
  payloadSize: number;
  contents: string;
}

const NAME_RE = /^(Full|Incr)-\d{8}-\d{8}-\d+(\.gz|\.Z|\.zlib)?(\.final)?$/;

function listFixtures(): FixtureFile[] {
  if (!existsSync(COMPAT_ROOT)) throw new Error(`compat fixtures missing: ${COMPAT_ROOT}`);
  const files: FixtureFile[] = [];
  for (const caseName of readdirSync(COMPAT_ROOT).sort()) {
    const dir = join(COMPAT_ROOT, caseName, 'snapstore', 'v2');
    if (!existsSync(dir)) continue;
    for (const name of readdirSync(dir).sort()) {
      const m = NAME_RE.exec(name);
      if (m === null) throw new Error(`unexpected file in fixtures: ${join(dir, name)}`);
      files.push({
        caseName,
        relPath: `v2/${name}`,
        path: join(dir, name),
        name,
        kind: m[1] as 'Full' | 'Incr',
        suffix: m[2] ?? '',
      });
    }
  }
  return files;
}

/** The per-file table of a case's workload.md, keyed by `v2/<name>`, plus its sha256 listing. */
function readWorkload(caseName: string): { rows: Map<string, TableRow>; sums: Map<string, string> } {
  const text = readFileSync(join(COMPAT_ROOT, caseName, 'workload.md'), 'utf8');
  const lines = text.split('\n');
  const headerAt = lines.findIndex((l) => l.startsWith('| path |'));
  if (headerAt < 0) throw new Error(`${caseName}/workload.md: no per-file table`);
  const header = lines[headerAt]!.split('|').map((c) => c.trim());
  const col = (title: string): number => {
    const i = header.indexOf(title);
    if (i < 0) throw new Error(`${caseName}/workload.md: no column "${title}"`);
    return i;
  };
  const [cPath, cSize, cKind, cPayload, cContents] = [
    col('path'),
    col('size (bytes)'),
    col('kind'),
    col('payload after decompression'),
    col('contents'),
  ];
  const rows = new Map<string, TableRow>();
  for (const line of lines.slice(headerAt + 2)) {
    if (!line.startsWith('|')) break;
    const cells = line.split('|').map((c) => c.trim());
    rows.set(cells[cPath]!.replace(/`/g, ''), {
      size: Number(cells[cSize]),
      kind: cells[cKind]!,
      payloadSize: Number(cells[cPayload]),
      contents: cells[cContents]!,
    });
  }
  const sums = new Map<string, string>();
  for (const m of text.matchAll(/^([0-9a-f]{64}) {2}(v2\/\S+)$/gm)) sums.set(m[2]!, m[1]!);
  return { rows, sums };
}

async function collect(source: Readable, t: Transform): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(
    source,
    t,
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        out.push(chunk);
        cb();
      },
    }),
  );
  return Buffer.concat(out);
}

const sha256 = (b: Uint8Array): Buffer => createHash('sha256').update(b).digest();

const fixtures = listFixtures();
const workloads = new Map([...new Set(fixtures.map((f) => f.caseName))].map((c) => [c, readWorkload(c)] as const));

describe('upstream v0.23 fixtures', () => {
  it('are all there (7 cases, every compression suffix)', () => {
    expect(new Set(fixtures.map((f) => f.caseName)).size).toBe(7);
    expect(new Set(fixtures.map((f) => f.suffix))).toEqual(new Set(['', '.gz', '.Z', '.zlib']));
    expect(fixtures.length).toBe(38);
  });

  for (const f of fixtures) {
    describe(`${f.caseName}/${f.relPath}`, () => {
      const { rows, sums } = workloads.get(f.caseName)!;

      it('is listed in workload.md with its size and sha256', () => {
        const file = readFileSync(f.path);
        const row = rows.get(f.relPath);
        expect(row, 'row in workload.md').toBeDefined();
        expect(file.length).toBe(row!.size);
        expect(row!.kind.startsWith(f.kind)).toBe(true);
        expect(sha256(file).toString('hex')).toBe(sums.get(f.relPath));
      });

      it('decompresses by suffix to the documented payload', async () => {
        const payload = await collect(createReadStream(f.path, { highWaterMark: 16 * 1024 }), createDecompressStream(f.suffix, f.name));
        const row = rows.get(f.relPath)!;
        expect(payload.length, 'payload after decompression').toBe(row.payloadSize);

        // body || sha256(body)
        const body = payload.subarray(0, payload.length - 32);
        expect(payload.subarray(payload.length - 32).equals(sha256(body)), 'sha256 trailer').toBe(true);

        if (f.kind === 'Full') {
          expect(payload.length % 512).toBe(32);
          expect(payload.subarray(16, 20).toString('hex'), 'bbolt magic').toBe('edda0ced');
        } else {
          const events = JSON.parse(body.toString('utf8')) as unknown;
          expect(Array.isArray(events)).toBe(true);
          const list = events as Array<Record<string, unknown>>;
          expect(list.length).toBeGreaterThan(0);
          for (const e of list) {
            expect(e).toHaveProperty('etcdEvent');
            expect(e).toHaveProperty('time');
          }
          // "34 events (29 put, 5 delete)": deletes carry "type":1, puts have no type.
          const m = /^(\d+) events \((\d+) put, (\d+) delete\)/.exec(row.contents);
          expect(m, row.contents).not.toBeNull();
          const deletes = list.filter((e) => (e['etcdEvent'] as { type?: number }).type === 1).length;
          expect([list.length, list.length - deletes, deletes]).toEqual([Number(m![1]), Number(m![2]), Number(m![3])]);
        }
      });

      if (f.suffix === '.Z') {
        it('is re-created byte for byte by our LZW encoder', async () => {
          const file = readFileSync(f.path);
          const payload = await collect(Readable.from([file]), createDecompressStream('.Z', f.name));
          const again = await collect(Readable.from([payload]), createCompressStream('lzw'));
          expect(again.length).toBe(file.length);
          expect(again.equals(file)).toBe(true);
        });
      }

      if (f.suffix === '.gz' || f.suffix === '.zlib') {
        it('has the framing bytes our compressor writes', async () => {
          const file = readFileSync(f.path);
          const policy = f.suffix === '.gz' ? 'gzip' : 'zlib';
          const header = f.suffix === '.gz' ? '1f8b08000000000000ff' : '789c';
          expect(file.subarray(0, header.length / 2).toString('hex')).toBe(header);
          const ours = await collect(Readable.from([Buffer.from('x')]), createCompressStream(policy));
          expect(ours.subarray(0, header.length / 2).toString('hex')).toBe(header);
        });
      }
    });
  }
});
