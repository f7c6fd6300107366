import { cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { LsRow } from '../../src/cli/commands/ls.js';
import { main } from '../../src/cli/main.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

/** Written by upstream v0.23.0 with the Local provider (see its workload.md). */
const FIXTURE = join(UPSTREAM_V023, 'gzip', 'snapstore');

async function run(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io = { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } };
  const code = await main(argv, {}, io, { homeDir: tmpdir() });
  return { code, stdout, stderr };
}

const EXPECTED: LsRow[] = [
  ['Full', 0, 301, 1795219404, 619826],
  ['Incr', 302, 337, 1795219408, 24681],
  ['Incr', 338, 352, 1795219411, 629977],
  ['Incr', 353, 355, 1795219415, 222790],
  ['Incr', 356, 385, 1795219417, 5116],
].map(([kind, start, last, unix, size]) => {
  const name = `${String(kind)}-${String(start).padStart(8, '0')}-${String(last).padStart(8, '0')}-${String(unix)}.gz`;
  return {
    kind: kind as string,
    startRevision: start as number,
    lastRevision: last as number,
    createdOn: new Date((unix as number) * 1000).toISOString().replace('.000Z', 'Z'),
    sizeBytes: size as number,
    compression: 'gzip',
    compressionSuffix: '.gz',
    encrypted: false,
    isFinal: false,
    isChunk: false,
    key: `v2/${name}`,
  };
});

describe('etcdbrctl ls', () => {
  it('lists the upstream fixture as JSON', async () => {
    const r = await run(['ls', '--storage-provider=Local', `--store-container=${FIXTURE}`, '-o', 'json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(EXPECTED);
  });

  it('lists the upstream fixture as a text table', async () => {
    const r = await run(['ls', '--storage-provider=Local', `--store-container=${FIXTURE}`]);
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(6);
    expect(lines[0]).toMatch(/^KIND\s+START\s+LAST\s+CREATED\s+SIZE\s+COMPRESSION\s+ENCRYPTED\s+FINAL\s+CHUNK\s+KEY$/);
    expect(lines[1]?.split(/\s+/)).toEqual([
      'Full',
      '0',
      '301',
      '2026-11-21T00:03:24Z',
      '619826',
      'gzip',
      'no',
      'false',
      'false',
      'v2/Full-00000000-00000301-1795219404.gz',
    ]);
    expect(lines[5]?.split(/\s+/)).toEqual([
      'Incr',
      '356',
      '385',
      '2026-11-21T00:03:37Z',
      '5116',
      'gzip',
      'no',
      'false',
      'false',
      'v2/Incr-00000356-00000385-1795219417.gz',
    ]);
    // Columns are aligned: every KEY starts at the same offset.
    expect(new Set(lines.map((l) => l.indexOf(l.includes('KEY') ? 'KEY' : 'v2/'))).size).toBe(1);
  });

  it('lists v1 and v2 layouts, final and uncompressed snapshots under a prefix', async () => {
    const root = mkdtempSync(join(tmpdir(), 'etcdbr-ls-'));
    cpSync(join(FIXTURE, 'v2'), join(root, 'etcd-main', 'v2'), { recursive: true });
    cpSync(
      join(FIXTURE, 'v2', 'Full-00000000-00000301-1795219404.gz'),
      join(root, 'etcd-main', 'v1', 'Backup-1700000000', 'Full-00000000-00000100-1700000000'),
    );
    writeFileSync(join(root, 'etcd-main', 'v2', 'Full-00000000-00000400-1795220000.zst.final'), 'x');
    writeFileSync(join(root, 'etcd-main', 'v2', 'not-a-snapshot'), 'x');
    const r = await run(['ls', '--storage-provider=Local', `--store-container=${root}`, '--store-prefix=etcd-main', '--output=json']);
    expect(r.code).toBe(0);
    const rows = JSON.parse(r.stdout) as LsRow[];
    expect(rows.map((x) => x.key)).toEqual([
      'etcd-main/v1/Backup-1700000000/Full-00000000-00000100-1700000000',
      ...EXPECTED.map((e) => `etcd-main/${e.key}`),
      'etcd-main/v2/Full-00000000-00000400-1795220000.zst.final',
    ]);
    expect(rows[0]).toMatchObject({ compression: 'none', compressionSuffix: '', createdOn: '2023-11-14T22:13:20Z' });
    expect(rows[6]).toMatchObject({ compression: 'zstd', isFinal: true, sizeBytes: 1 });
  });

  it('prints an empty list for an empty store', async () => {
    const root = mkdtempSync(join(tmpdir(), 'etcdbr-ls-'));
    const json = await run(['ls', '--storage-provider=Local', `--store-container=${root}`, '-ojson']);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual([]);
    const text = await run(['ls', '--storage-provider=Local', `--store-container=${root}`]);
    expect(text.stdout.trimEnd().split('\n')).toHaveLength(1);
  });

  it('needs a store', async () => {
    const r = await run(['ls']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('Error: no store to list: give --storage-provider (Local, S3, ABS, GCS, Swift, OSS, ECS or OCS)\n');
  });

  it('rejects an unknown output format', async () => {
    const r = await run(['ls', '--storage-provider=Local', '-o', 'yaml']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('--output: unknown format "yaml"; use text or json');
  });

  it('reports store errors with exit code 1', async () => {
    const root = mkdtempSync(join(tmpdir(), 'etcdbr-ls-'));
    // A file where the store directory should be: the store cannot be opened.
    writeFileSync(join(root, 'blocked'), 'x');
    const r = await run(['ls', '--storage-provider=Local', `--store-container=${join(root, 'blocked')}`]);
    expect(r.code).toBe(1);
    // One line naming the path and what to check (the store error says it; ls adds nothing).
    expect(r.stderr).toMatch(/^Error: local store path \S*blocked is not a directory: check --store-container\n$/);
  });
});
