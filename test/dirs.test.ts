import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { mkdirParents } from '../src/dirs.js';
import { cleanupAfterEach } from './support/cleanups.js';

const cleanups = cleanupAfterEach();

describe('mkdirParents', () => {
  it('makes the missing levels with the mode and returns the first one it made, as Node’s recursive mkdir does', async () => {
    const dir = await cleanups.tempDir('etcdbr-dirs-');
    expect(await mkdirParents(join(dir, 'a', 'b', 'c'))).toBe(join(dir, 'a'));
    for (const d of ['a', 'a/b', 'a/b/c']) {
      const s = statSync(join(dir, d));
      expect(s.isDirectory()).toBe(true);
      expect(s.mode & 0o777 & ~process.umask()).toBe(0o700 & ~process.umask());
    }
    expect(await mkdirParents(join(dir, 'a', 'b', 'c'))).toBeUndefined();
    expect(await mkdirParents(dir)).toBeUndefined();
  });

  it('fails with the reason of the level that cannot be made, not ENOENT', async () => {
    const dir = await cleanups.tempDir('etcdbr-dirs-');
    writeFileSync(join(dir, 'file'), '');
    await expect(mkdirParents(join(dir, 'file'))).rejects.toMatchObject({
      code: 'E_INVALID_INPUT',
      message: `${join(dir, 'file')} is not a directory`,
    });
    await expect(mkdirParents(join(dir, 'file', 'sub'))).rejects.toMatchObject({ code: 'ENOTDIR' });
  });
});
