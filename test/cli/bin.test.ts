import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = fileURLToPath(new URL('../../bin/etcdbrctl', import.meta.url));

function etcdbrctl(...args: string[]) {
  return spawnSync(bin, args, { cwd: root, encoding: 'utf8', timeout: 30_000 });
}

describe('bin/etcdbrctl (built)', () => {
  it('--version prints the version block and exits 0', () => {
    const r = etcdbrctl('--version');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^etcdbrctl Version: \d+\.\d+\.\d+\nGit SHA: \S+\nNode Version: v\d+\.\d+\.\d+\nOS\/Arch: \w+\/\w+\n$/);
  });

  it('snapshot --bogus fails with exit code 1 and the unknown flag', () => {
    const r = etcdbrctl('snapshot', '--bogus');
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe("Error: unknown flag: --bogus\nRun 'etcdbrctl snapshot --help' for usage.\n");
  });

  it('compact on an empty store does nothing and exits 0', () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-bin-compact-'));
    try {
      const r = etcdbrctl('compact', '--storage-provider=Local', `--store-container=${dir}`, `--data-dir=${join(dir, 'compaction.etcd')}`);
      expect(r.status).toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain('No base snapshot found. Will do nothing.');
      expect(readdirSync(dir)).toEqual(['v2']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
