/**
 * Snapshot names, keys, ordering, selection and JSON (upstream-reference.md §3.1–3.4, acceptance
 * cases 1–7). Expected values are written out literally or read from the Go-written compat fixtures.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { isSnapStoreError } from '../src/errors.js';
import type { Logger } from '../src/logger.js';
import {
  generateSnapshotName,
  isDeletable,
  listedObjectKey,
  listingPrefix,
  newSnapshot,
  objectKey,
  parseSnapshotKey,
  setFinal,
  snapshotFromJSON,
  snapshotToJSON,
  tryParseSnapshotKey,
} from '../src/snapshot.js';
import type { Snapshot, SnapshotKind } from '../src/snapshot.js';
import { compareSnapshots, filteredBackups, latestFulls, latestSet, sortSnapshots } from '../src/snapshot-order.js';
import { listedSnapshot } from './support/snapshots.js';
import { UPSTREAM_V023 } from '../../test/support/fixtures.js';

const COMPAT = UPSTREAM_V023;

/** Parses `key` and returns a compact view of the fields that matter. */
function view(s: Snapshot): Record<string, unknown> {
  return {
    kind: s.kind,
    start: s.startRevision,
    last: s.lastRevision,
    unix: s.createdOn.getTime() / 1000,
    snapDir: s.snapDir,
    snapName: s.snapName,
    prefix: s.prefix,
    suffix: s.compressionSuffix,
    chunk: s.isChunk,
    final: s.isFinal,
    ...(s.chunkNumber === undefined ? {} : { chunkNumber: s.chunkNumber }),
  };
}

function expectBadName(fn: () => unknown, fragment: string): void {
  try {
    fn();
  } catch (err) {
    expect(isSnapStoreError(err, 'E_BAD_NAME')).toBe(true);
    expect((err as Error).message).toContain(fragment);
    return;
  }
  throw new Error('expected E_BAD_NAME');
}

const names = (list: readonly Snapshot[]): string[] => list.map((s) => s.snapName + (s.isChunk ? `#${s.chunkNumber ?? '?'}` : ''));

describe('generateSnapshotName / newSnapshot', () => {
  it.each([
    // acceptance 1
    [
      { kind: 'Full', startRevision: 0, lastRevision: 1234, unix: 1700000000, suffix: '.gz', final: false },
      'Full-00000000-00001234-1700000000.gz',
    ],
    // acceptance 2: wider than 8 digits, never truncated
    [
      { kind: 'Incr', startRevision: 123456789, lastRevision: 1234567890, unix: 1700000100, suffix: '', final: false },
      'Incr-123456789-1234567890-1700000100',
    ],
    [
      { kind: 'Full', startRevision: 0, lastRevision: 1234, unix: 1700000000, suffix: '.gz', final: true },
      'Full-00000000-00001234-1700000000.gz.final',
    ],
    [
      { kind: 'Full', startRevision: 0, lastRevision: 1234, unix: 1700000000, suffix: '', final: true },
      'Full-00000000-00001234-1700000000.final',
    ],
    [
      { kind: 'Incr', startRevision: 1235, lastRevision: 1300, unix: 1700000100, suffix: '.Z', final: false },
      'Incr-00001235-00001300-1700000100.Z',
    ],
    [{ kind: 'Incr', startRevision: 1, lastRevision: 1, unix: 5, suffix: '.zlib', final: false }, 'Incr-00000001-00000001-5.zlib'],
    [
      { kind: 'Full', startRevision: 0, lastRevision: 99999999, unix: 1700000000, suffix: '.zst', final: false },
      'Full-00000000-99999999-1700000000.zst',
    ],
  ] as const)('%j -> %s', (f, expected) => {
    const snap = newSnapshot({
      kind: f.kind,
      startRevision: f.startRevision,
      lastRevision: f.lastRevision,
      // sub-second part is dropped from the name, as Go's Unix() does
      createdOn: new Date(f.unix * 1000 + 999),
      compressionSuffix: f.suffix,
      isFinal: f.final,
    });
    expect(snap.snapName).toBe(expected);
    expect(snap).toMatchObject({ snapDir: '', prefix: '', isChunk: false, isFinal: f.final, compressionSuffix: f.suffix });
    expect(generateSnapshotName(snap)).toBe(expected);
  });

  it('acceptance 1: the object key under the store prefix', () => {
    const snap = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 1234,
      createdOn: new Date(1700000000_000),
      compressionSuffix: '.gz',
    });
    expect(objectKey('shoot--p--c/etcd-main/v2', snap)).toBe('shoot--p--c/etcd-main/v2/Full-00000000-00001234-1700000000.gz');
    expect(objectKey('v2', snap)).toBe('v2/Full-00000000-00001234-1700000000.gz');
  });

  it.each([
    [{ kind: 'Full', startRevision: 1, lastRevision: 5 }, 'full snapshot starts at revision 0'],
    [{ kind: 'Incr', startRevision: 6, lastRevision: 5 }, 'greater than last revision'],
    [{ kind: 'Incr', startRevision: -1, lastRevision: 5 }, 'start revision -1'],
    [{ kind: 'Incr', startRevision: 1.5, lastRevision: 5 }, 'start revision 1.5'],
    [{ kind: 'Incr', startRevision: 1, lastRevision: 2 ** 53 }, 'last revision 9007199254740992'],
    [{ kind: 'Foo', startRevision: 0, lastRevision: 5 }, 'unknown snapshot kind'],
  ])('rejects %j', (f, fragment) => {
    expectBadName(
      () => newSnapshot({ ...(f as { kind: SnapshotKind; startRevision: number; lastRevision: number }), createdOn: new Date(1e12) }),
      fragment,
    );
  });

  it('rejects invalid times and unknown suffixes', () => {
    expectBadName(() => newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 1, createdOn: new Date(NaN) }), 'creation time');
    expectBadName(() => newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 1, createdOn: new Date(-1000) }), 'creation time');
    expectBadName(
      () => newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 1, createdOn: new Date(1e12), compressionSuffix: '.bz2' as '.gz' }),
      'compression suffix',
    );
  });
});

describe('parseSnapshotKey', () => {
  it.each<[string, Record<string, unknown>]>([
    [
      'shoot--p--c/etcd-main/v2/Full-00000000-00001234-1700000000.gz',
      {
        kind: 'Full',
        start: 0,
        last: 1234,
        unix: 1700000000,
        snapDir: '',
        snapName: 'Full-00000000-00001234-1700000000.gz',
        prefix: 'shoot--p--c/etcd-main/v2/',
        suffix: '.gz',
        chunk: false,
        final: false,
      },
    ],
    // acceptance 3
    [
      'v2/Full-00000000-00001234-1700000000.gz.final',
      {
        kind: 'Full',
        start: 0,
        last: 1234,
        unix: 1700000000,
        snapDir: '',
        snapName: 'Full-00000000-00001234-1700000000.gz.final',
        prefix: 'v2/',
        suffix: '.gz',
        chunk: false,
        final: true,
      },
    ],
    [
      'v2/Full-00000000-00001234-1700000000.final',
      {
        kind: 'Full',
        start: 0,
        last: 1234,
        unix: 1700000000,
        snapDir: '',
        snapName: 'Full-00000000-00001234-1700000000.final',
        prefix: 'v2/',
        suffix: '',
        chunk: false,
        final: true,
      },
    ],
    // acceptance 2
    [
      'a/b/v2/Incr-123456789-1234567890-1700000100.zlib',
      {
        kind: 'Incr',
        start: 123456789,
        last: 1234567890,
        unix: 1700000100,
        snapDir: '',
        snapName: 'Incr-123456789-1234567890-1700000100.zlib',
        prefix: 'a/b/v2/',
        suffix: '.zlib',
        chunk: false,
        final: false,
      },
    ],
    // acceptance 4: GCS chunk object
    [
      'etcd-main/v2/Full-00000000-00000100-1700000000.gz/0000000001',
      {
        kind: 'Full',
        start: 0,
        last: 100,
        unix: 1700000000,
        snapDir: '',
        snapName: 'Full-00000000-00000100-1700000000.gz',
        prefix: 'etcd-main/v2/',
        suffix: '.gz',
        chunk: true,
        final: false,
        chunkNumber: 1,
      },
    ],
    // acceptance 5: v1 layout
    [
      'etcd-main/v1/Backup-1700000000/Incr-00000101-00000200-1700000100',
      {
        kind: 'Incr',
        start: 101,
        last: 200,
        unix: 1700000100,
        snapDir: 'Backup-1700000000',
        snapName: 'Incr-00000101-00000200-1700000100',
        prefix: 'etcd-main/v1/',
        suffix: '',
        chunk: false,
        final: false,
      },
    ],
    [
      'etcd-main/v1/Backup-1700000000/Full-00000000-00000100-1700000000.Z/0000000012',
      {
        kind: 'Full',
        start: 0,
        last: 100,
        unix: 1700000000,
        snapDir: 'Backup-1700000000',
        snapName: 'Full-00000000-00000100-1700000000.Z',
        prefix: 'etcd-main/v1/',
        suffix: '.Z',
        chunk: true,
        final: false,
        chunkNumber: 12,
      },
    ],
    // Local provider passes absolute paths
    [
      '/home/u/default.bkp/v2/Incr-00000001-00000002-3',
      {
        kind: 'Incr',
        start: 1,
        last: 2,
        unix: 3,
        snapDir: '',
        snapName: 'Incr-00000001-00000002-3',
        prefix: '/home/u/default.bkp/v2/',
        suffix: '',
        chunk: false,
        final: false,
      },
    ],
    // unpadded revisions parse (upstream ParseInt); the raw name is kept so the key can be rebuilt
    [
      'v2/Incr-5-7-3',
      {
        kind: 'Incr',
        start: 5,
        last: 7,
        unix: 3,
        snapDir: '',
        snapName: 'Incr-5-7-3',
        prefix: 'v2/',
        suffix: '',
        chunk: false,
        final: false,
      },
    ],
    // unknown suffixes are kept as parsed; decompression refuses them later
    [
      'v2/Incr-00000001-00000002-3.bz2',
      {
        kind: 'Incr',
        start: 1,
        last: 2,
        unix: 3,
        snapDir: '',
        snapName: 'Incr-00000001-00000002-3.bz2',
        prefix: 'v2/',
        suffix: '.bz2',
        chunk: false,
        final: false,
      },
    ],
    // upstream's dot rule: only the 2nd part is the suffix; final only if the last part is `final`
    [
      'v2/Full-00000000-00000002-3.final.gz',
      {
        kind: 'Full',
        start: 0,
        last: 2,
        unix: 3,
        snapDir: '',
        snapName: 'Full-00000000-00000002-3.final.gz',
        prefix: 'v2/',
        suffix: '',
        chunk: false,
        final: false,
      },
    ],
    // `v1`/`v2` count only as whole path elements: a prefix element ending in v1 is not the layout
    [
      'cluster-v1/v2/Full-00000000-00000002-3.gz',
      {
        kind: 'Full',
        start: 0,
        last: 2,
        unix: 3,
        snapDir: '',
        snapName: 'Full-00000000-00000002-3.gz',
        prefix: 'cluster-v1/v2/',
        suffix: '.gz',
        chunk: false,
        final: false,
      },
    ],
    [
      'a/v1/b/v2/Full-00000000-00000002-3.gz',
      {
        kind: 'Full',
        start: 0,
        last: 2,
        unix: 3,
        snapDir: '',
        snapName: 'Full-00000000-00000002-3.gz',
        prefix: 'a/v1/b/v2/',
        suffix: '.gz',
        chunk: false,
        final: false,
      },
    ],
  ])('%s', (key, expected) => {
    const snap = parseSnapshotKey(key);
    expect(view(snap)).toEqual(expected);
    expect(listedObjectKey(snap)).toBe(key);
  });

  it('createdOn is UTC seconds', () => {
    expect(parseSnapshotKey('v2/Full-00000000-00001234-1700000000.gz').createdOn.toISOString()).toBe('2023-11-14T22:13:20.000Z');
  });

  // acceptance 6
  it.each([
    ['v2/Full-00000000-1700000000.gz', 'does not have 4'],
    ['v2/Full-00000000-00000001-00000002-1700000000', 'does not have 4'],
    ['v2/Incr-0000000x-00000010-1700000000', 'invalid start revision "0000000x"'],
    ['v2/Incr-00000001-abc-1700000000', 'invalid last revision "abc"'],
    ['v2/Incr-+0000001-00000010-1700000000', 'invalid start revision'],
    ['v2/Incr-00000011-00000010-1700000000', 'should be at least start revision'],
    ['v2/Foo-00000000-00000010-1700000000', 'unknown snapshot kind "Foo"'],
    ['v2/full-00000000-00000010-1700000000', 'unknown snapshot kind'],
    ['etcd-main/Full-00000000-00000010-1700000000', 'does not contain a v1/ or v2/'],
    ['etcd-mainv2/Full-00000000-00000010-1700000000', 'does not contain a v1/ or v2/'],
    ['v2/Incr-00000001-00000010-17000x0000.gz', 'invalid creation time'],
    ['v2/Incr-00000001-00000010-.gz', 'invalid creation time'],
    ['v2/Incr-00000001-9007199254740992-1700000000', 'above 9007199254740991'],
    ['v2/Incr-00000001-99999999999999999999-1700000000', 'above 9007199254740991'],
    ['v2/Incr-00000001-00000010-99999999999999', 'out of range'],
    ['v2/Full-00000000-00000100-1700000000.gz/1', '%010d'],
    ['v2/Full-00000000-00000100-1700000000.gz/000000000x', '%010d'],
    ['v2/x/Full-00000000-00000100-1700000000.gz/0000000001', 'path elements after v2/'],
    ['v2/', 'empty path element'],
    ['v2/Full-00000000-00000100-1700000000.gz/', 'empty path element'],
    ['v1/Full-00000000-00000100-1700000000.gz', 'v1/<dir>/<name>'],
    ['v1/Backup-1/Full-00000000-00000100-1700000000.gz/0000000001/x', 'v1/<dir>/<name>'],
  ])('rejects %s', (key, fragment) => {
    expectBadName(() => parseSnapshotKey(key), fragment);
    expectBadName(() => parseSnapshotKey(key), JSON.stringify(key));
  });

  it('tryParseSnapshotKey logs and skips invalid keys', () => {
    const warnings: Array<[unknown, string | undefined]> = [];
    const logger: Logger = {
      debug() {},
      info() {},
      warn(obj, msg) {
        warnings.push([obj, msg]);
      },
      error() {},
    };
    expect(tryParseSnapshotKey('v2/Foo-00000000-00000010-1700000000', logger)).toBeUndefined();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.[1]).toBe('Invalid snapshot found. Ignoring it');
    expect(warnings[0]?.[0]).toMatchObject({ key: 'v2/Foo-00000000-00000010-1700000000' });
    expect(String((warnings[0]?.[0] as { reason: string }).reason)).toContain('unknown snapshot kind');
    expect(tryParseSnapshotKey('v2/Incr-00000001-00000010-1700000000', logger)?.lastRevision).toBe(10);
    expect(warnings).toHaveLength(1);
  });

  it('round-trips generate -> key -> parse', () => {
    const cases: Array<[SnapshotKind, number, number, number, '' | '.gz' | '.Z' | '.zlib' | '.zst', boolean]> = [
      ['Full', 0, 0, 0, '', false],
      ['Full', 0, 1234, 1700000000, '.gz', true],
      ['Full', 0, 123456789012, 1800000000, '.zst', false],
      ['Incr', 1235, 1300, 1700000100, '.Z', false],
      ['Incr', 99999999, 100000000, 1700000200, '.zlib', false],
      ['Full', 0, 7, 1700000300, '', true],
    ];
    for (const [kind, startRevision, lastRevision, unix, compressionSuffix, isFinal] of cases) {
      const snap = newSnapshot({ kind, startRevision, lastRevision, createdOn: new Date(unix * 1000), compressionSuffix, isFinal });
      const parsed = parseSnapshotKey(objectKey('x/y/v2', snap));
      expect(parsed).toEqual({ ...snap, prefix: 'x/y/v2/' });
    }
  });
});

describe('compat fixtures written by Go v0.23', () => {
  const cases = readdirSync(COMPAT, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort();
  const suffixOf: Record<string, string> = { none: '', gzip: '.gz', lzw: '.Z', zlib: '.zlib' };

  /** The per-file table of workload.md: `v2/<name>` -> kind column and revision range. */
  function workloadTable(c: string): Map<string, { kind: string; start: number; last: number }> {
    const table = new Map<string, { kind: string; start: number; last: number }>();
    for (const line of readFileSync(path.join(COMPAT, c, 'workload.md'), 'utf8').split('\n')) {
      const m = /^\| `v2\/([^`]+)` \| \d+ \| ([^|]+) \| [^|]+ \| (\d+)\.\.(\d+) \|/.exec(line);
      if (m) table.set(m[1] as string, { kind: (m[2] as string).trim(), start: Number(m[3]), last: Number(m[4]) });
    }
    return table;
  }

  it('has the seven cases', () => {
    expect(cases).toEqual(['compacted-gzip', 'final-gzip', 'gzip', 'lzw', 'none', 'two-fulls-gzip', 'zlib']);
  });

  it.each(cases)('%s: every file name parses as workload.md describes it', (c) => {
    const files = readdirSync(path.join(COMPAT, c, 'snapstore', 'v2')).sort();
    const table = workloadTable(c);
    expect(files).toEqual([...table.keys()].sort());
    const caseSuffix = suffixOf[c] ?? '.gz';
    for (const file of files) {
      const key = `${c}/snapstore/v2/${file}`;
      const snap = parseSnapshotKey(key);
      const row = table.get(file);
      const unix = Number(/-(\d+)(\.|$)/.exec(file)?.[1]);
      expect(view(snap), file).toEqual({
        kind: row?.kind.startsWith('Full') ? 'Full' : 'Incr',
        start: row?.start,
        last: row?.last,
        unix,
        snapDir: '',
        snapName: file,
        prefix: `${c}/snapstore/v2/`,
        suffix: caseSuffix,
        chunk: false,
        final: row?.kind === 'Full (final)',
      });
      expect(listedObjectKey(snap)).toBe(key);
      // The same fields produce the same name (Go's formatting reproduced byte for byte).
      expect(generateSnapshotName(snap)).toBe(file);
    }
  });

  // README table, column "upstream restore used"
  it.each([
    ['none', 'Full-00000000-00000283-1795219380', 4],
    ['gzip', 'Full-00000000-00000301-1795219404.gz', 4],
    ['lzw', 'Full-00000000-00000253-1795219429.Z', 4],
    ['zlib', 'Full-00000000-00000324-1795219453.zlib', 4],
    ['compacted-gzip', 'Full-00000000-00000400-1795219493.gz', 0],
    ['two-fulls-gzip', 'Full-00000000-00000297-1795219513.gz', 1],
    ['final-gzip', 'Full-00000000-00000397-1795219540.gz.final', 0],
  ])('%s: latest set is %s + %i deltas', (c, full, deltaCount) => {
    // Listing order of a directory is arbitrary; latestSet must not depend on it.
    const files = readdirSync(path.join(COMPAT, c, 'snapstore', 'v2'))
      .sort()
      .reverse();
    const set = latestSet(files.map((f) => parseSnapshotKey(`${c}/snapstore/v2/${f}`)));
    expect(set.full?.snapName).toBe(full);
    expect(set.deltas).toHaveLength(deltaCount);
    for (let i = 1; i < set.deltas.length; i++) {
      expect(set.deltas[i]?.startRevision).toBe((set.deltas[i - 1]?.lastRevision ?? NaN) + 1);
    }
    if (set.deltas.length > 0) expect(set.deltas[0]?.startRevision).toBe((set.full?.lastRevision ?? NaN) + 1);
  });
});

describe('keys and prefixes', () => {
  it.each([
    ['v2', ''],
    ['a/v2', 'a/'],
    ['shoot--p--c/etcd-main/v2', 'shoot--p--c/etcd-main/'],
    ['a/b/v2/', 'a/b/'],
    ['/home/u/default.bkp/v2', '/home/u/default.bkp/'],
    ['v1', ''],
  ])('listingPrefix(%s) = %s', (prefix, expected) => {
    expect(listingPrefix(prefix)).toBe(expected);
  });

  it('objectKey: v1 snapshots copied into a v2 store stay v1 (adaptPrefix)', () => {
    const v1 = parseSnapshotKey('src/v1/Backup-1700000000/Incr-00000101-00000200-1700000100');
    expect(objectKey('dst/etcd-main/v2', v1)).toBe('dst/etcd-main/v1/Backup-1700000000/Incr-00000101-00000200-1700000100');
    expect(objectKey('v2', v1)).toBe('v1/Backup-1700000000/Incr-00000101-00000200-1700000100');
    // only the last `v2` element is the layout element
    expect(objectKey('v2/x/v2', v1)).toBe('v2/x/v1/Backup-1700000000/Incr-00000101-00000200-1700000100');
    const v1Root = parseSnapshotKey('v1/Backup-1700000000/Full-00000000-00000100-1700000000');
    expect(objectKey('a/v2', v1Root)).toBe('a/v1/Backup-1700000000/Full-00000000-00000100-1700000000');
  });

  it('objectKey: v2 snapshots go under the store prefix, whatever their listed prefix', () => {
    const v2 = parseSnapshotKey('src/cluster-v1/v2/Incr-00000101-00000200-1700000100.gz');
    expect(objectKey('dst/v2', v2)).toBe('dst/v2/Incr-00000101-00000200-1700000100.gz');
  });

  it('listedObjectKey rebuilds chunk keys', () => {
    const chunk = parseSnapshotKey('p/v2/Full-00000000-00000100-1700000000.gz/0000000007');
    expect(listedObjectKey(chunk)).toBe('p/v2/Full-00000000-00000100-1700000000.gz/0000000007');
    expect(objectKey('q/v2', chunk)).toBe('q/v2/Full-00000000-00000100-1700000000.gz/0000000007');
  });
});

describe('ordering and selection', () => {
  it('sorts by last revision, then complete before chunk, then creation second (acceptance 7)', () => {
    const a = listedSnapshot('Full', 0, 100, 1000);
    const chunk2 = listedSnapshot('Full', 0, 100, 900, { isChunk: true, chunkNumber: 2 });
    const chunk1 = listedSnapshot('Full', 0, 100, 900, { isChunk: true, chunkNumber: 1 });
    const b = listedSnapshot('Incr', 101, 200, 1100);
    const bEarlier = listedSnapshot('Incr', 150, 200, 1050);
    const c = listedSnapshot('Incr', 201, 300, 1200);
    // same second, different milliseconds: equal (Go compares Unix() seconds); stable keeps input order
    const d1 = listedSnapshot('Incr', 301, 400, 1300, { createdOn: new Date(1300_900), snapName: 'd1' });
    const d2 = listedSnapshot('Incr', 301, 400, 1300, { createdOn: new Date(1300_100), snapName: 'd2' });
    const input = [c, chunk2, b, d1, a, d2, chunk1, bEarlier];
    const sorted = sortSnapshots(input);
    expect(names(sorted)).toEqual(names([a, chunk1, chunk2, bEarlier, b, c, d1, d2]));
    // the input is untouched
    expect(input[0]).toBe(c);
    expect(compareSnapshots(a, chunk1)).toBeLessThan(0);
    expect(compareSnapshots(chunk1, a)).toBeGreaterThan(0);
    expect(compareSnapshots(d1, d2)).toBe(0);
    expect(compareSnapshots(b, bEarlier)).toBeGreaterThan(0);
  });

  it('latest set: newest full and later deltas ascending; chunks ignored (acceptance 4, 7)', () => {
    const f1 = listedSnapshot('Full', 0, 100, 1000);
    const d1 = listedSnapshot('Incr', 101, 200, 1100);
    const f2 = listedSnapshot('Full', 0, 200, 1150);
    const d2 = listedSnapshot('Incr', 201, 300, 1200);
    const d3 = listedSnapshot('Incr', 301, 400, 1300);
    // a chunk of an in-flight full with the highest revision must not become the base
    const chunk = listedSnapshot('Full', 0, 500, 1400, { isChunk: true, chunkNumber: 1 });
    const set = latestSet([d3, chunk, f1, d2, f2, d1]);
    expect(set.full).toBe(f2);
    expect(names(set.deltas)).toEqual(names([d2, d3]));
  });

  it('latest set without a full: undefined + all deltas', () => {
    const d1 = listedSnapshot('Incr', 101, 200, 1100);
    const d2 = listedSnapshot('Incr', 201, 300, 1200);
    expect(latestSet([d2, d1])).toEqual({ full: undefined, deltas: [d1, d2] });
    expect(latestSet([])).toEqual({ full: undefined, deltas: [] });
  });

  it('latest set: a final full is the base (the compat final-gzip case)', () => {
    const f = listedSnapshot('Full', 0, 397, 1540, { isFinal: true, snapName: 'Full-00000000-00000397-1540.gz.final' });
    const d = listedSnapshot('Incr', 366, 394, 1540);
    expect(latestSet([d, f])).toEqual({ full: f, deltas: [] });
  });

  it('latestFulls: newest n fulls, newest first', () => {
    const f1 = listedSnapshot('Full', 0, 100, 1000);
    const f2 = listedSnapshot('Full', 0, 200, 2000);
    const f3 = listedSnapshot('Full', 0, 300, 3000);
    const d = listedSnapshot('Incr', 301, 400, 3100);
    const chunk = listedSnapshot('Full', 0, 500, 3200, { isChunk: true, chunkNumber: 1 });
    const list = [f1, f2, f3, d, chunk];
    expect(latestFulls(list, 2)).toEqual([f3, f2]);
    expect(latestFulls(list, 4)).toEqual([f3, f2, f1]);
    expect(latestFulls(list, 0)).toEqual([]);
  });

  it('filteredBackups: groups by full, newest first, deltas newest first', () => {
    const orphan = listedSnapshot('Incr', 1, 50, 900);
    const f1 = listedSnapshot('Full', 0, 100, 1000);
    const d11 = listedSnapshot('Incr', 101, 150, 1050);
    const d12 = listedSnapshot('Incr', 151, 200, 1100);
    const f2 = listedSnapshot('Full', 0, 200, 2000);
    const f3 = listedSnapshot('Full', 0, 300, 3000);
    const d31 = listedSnapshot('Incr', 301, 400, 3100);
    const d32 = listedSnapshot('Incr', 401, 500, 3200);
    const list = [orphan, f1, d11, d12, f2, f3, d31, d32];
    expect(filteredBackups(list, -1)).toEqual([f3, d32, d31, f2, f1, d12, d11]);
    expect(filteredBackups(list, 1)).toEqual([f3, d32, d31]);
    expect(filteredBackups(list, 2)).toEqual([f3, d32, d31, f2]);
    expect(filteredBackups(list, 0)).toEqual([]);
    // the filter is applied before counting (upstream: --max-backup-age then --max-backups-to-copy)
    expect(filteredBackups(list, 1, (full) => full.createdOn.getTime() < 2500_000)).toEqual([f2]);
    expect(filteredBackups(list, -1, (full) => full !== f2)).toEqual([f3, d32, d31, f1, d12, d11]);
  });

  it('setFinal appends and strips .final', () => {
    const snap = newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 5, createdOn: new Date(1e12), compressionSuffix: '.gz' });
    const final = setFinal(snap, true);
    expect(final.snapName).toBe('Full-00000000-00000005-1000000000.gz.final');
    expect(final.isFinal).toBe(true);
    expect(snap.isFinal).toBe(false);
    expect(setFinal(final, true).snapName).toBe('Full-00000000-00000005-1000000000.gz.final');
    const back = setFinal(final, false);
    expect(back.snapName).toBe('Full-00000000-00000005-1000000000.gz');
    expect(back.isFinal).toBe(false);
    expect(setFinal(parseSnapshotKey('v2/Full-00000000-00001234-1700000000.final'), false).snapName).toBe(
      'Full-00000000-00001234-1700000000',
    );
  });

  it('isDeletable honours the immutability expiry', () => {
    const now = new Date('2026-03-18T12:00:00Z');
    expect(isDeletable(listedSnapshot('Full', 0, 1, 1), now)).toBe(true);
    expect(isDeletable(listedSnapshot('Full', 0, 1, 1, { immutabilityExpiryTime: new Date('2026-03-18T12:00:01Z') }), now)).toBe(false);
    expect(isDeletable(listedSnapshot('Full', 0, 1, 1, { immutabilityExpiryTime: new Date('2026-03-18T12:00:00Z') }), now)).toBe(false);
    expect(isDeletable(listedSnapshot('Full', 0, 1, 1, { immutabilityExpiryTime: new Date('2026-03-18T11:59:59Z') }), now)).toBe(true);
  });
});

describe('JSON', () => {
  it('has upstream field names, zero time and null versionID (acceptance 25)', () => {
    const snap = parseSnapshotKey('etcd-main/v2/Incr-00001235-00001300-1700000100.gz');
    const json = snapshotToJSON(snap);
    expect(JSON.stringify(json)).toBe(
      '{"createdOn":"2023-11-14T22:15:00Z","immutabilityExpriyTime":"0001-01-01T00:00:00Z","versionID":null,' +
        '"kind":"Incr","snapDir":"","snapName":"Incr-00001235-00001300-1700000100.gz","prefix":"etcd-main/v2/",' +
        '"compressionSuffix":".gz","startRevision":1235,"lastRevision":1300,"isChunk":false,"isFinal":false}',
    );
    expect(snapshotFromJSON(JSON.parse(JSON.stringify(json)))).toEqual(snap);
  });

  it('formats sub-second times like Go RFC3339Nano and keeps expiry and version', () => {
    const snap: Snapshot = {
      ...newSnapshot({
        kind: 'Full',
        startRevision: 0,
        lastRevision: 397,
        createdOn: new Date('2026-11-21T00:05:40.540Z'),
        compressionSuffix: '.gz',
        isFinal: true,
      }),
      immutabilityExpiryTime: new Date('2026-12-21T00:05:40.007Z'),
      versionId: '3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo',
    };
    const json = snapshotToJSON(snap);
    expect(json.createdOn).toBe('2026-11-21T00:05:40.54Z');
    expect(json.immutabilityExpriyTime).toBe('2026-12-21T00:05:40.007Z');
    expect(json.versionID).toBe('3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo');
    expect(json.snapName).toBe('Full-00000000-00000397-1795219540.gz.final');
    expect(snapshotFromJSON(json)).toEqual(snap);
  });

  it('reads what the Go server answered in the compat run (v0.23 JSON, nanoseconds, no expiry field)', () => {
    const go = JSON.parse(
      '{"kind":"Full","startRevision":0,"lastRevision":397,"createdOn":"2026-11-21T00:05:40.544260385Z","snapDir":"","snapName":"Full-00000000-00000397-1795219540.gz.final","isChunk":false,"prefix":"","compressionSuffix":".gz","isFinal":true}',
    ) as unknown;
    const snap = snapshotFromJSON(go);
    expect(snap).toEqual({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 397,
      createdOn: new Date('2026-11-21T00:05:40.544Z'),
      snapDir: '',
      snapName: 'Full-00000000-00000397-1795219540.gz.final',
      prefix: '',
      compressionSuffix: '.gz',
      isChunk: false,
      isFinal: true,
    });
  });

  it('parses offsets and chunk names', () => {
    const snap = snapshotFromJSON({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 100,
      createdOn: '2023-11-15T00:13:20+02:00',
      immutabilityExpriyTime: '0001-01-01T00:00:00Z',
      versionID: null,
      snapDir: '',
      snapName: 'Full-00000000-00000100-1700000000.gz/0000000003',
      prefix: 'v2/',
      compressionSuffix: '.gz',
      isChunk: true,
      isFinal: false,
    });
    expect(snap.createdOn.toISOString()).toBe('2023-11-14T22:13:20.000Z');
    expect(snap.snapName).toBe('Full-00000000-00000100-1700000000.gz');
    expect(snap.chunkNumber).toBe(3);
    expect(snap.immutabilityExpiryTime).toBeUndefined();
    expect(snapshotToJSON(snap).snapName).toBe('Full-00000000-00000100-1700000000.gz/0000000003');
  });

  it.each([
    [null, 'not an object'],
    [{ kind: 'Foo', createdOn: '2023-11-14T22:13:20Z', snapName: 'x' }, 'unknown kind'],
    [{ kind: 'Full', createdOn: 'yesterday', snapName: 'x' }, 'createdOn'],
    [{ kind: 'Full', createdOn: '2023-11-14T22:13:20Z' }, 'snapName'],
    [{ kind: 'Full', createdOn: '2023-11-14T22:13:20Z', snapName: 'x', lastRevision: '5' }, 'lastRevision'],
    [{ kind: 'Full', createdOn: '2023-11-14T22:13:20Z', snapName: 'x', versionID: 5 }, 'versionID'],
  ])('rejects %j', (obj, fragment) => {
    expectBadName(() => snapshotFromJSON(obj), fragment);
  });
});
