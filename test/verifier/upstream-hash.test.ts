/**
 * The drill's HashKV of chains the Go etcd-backup-restore v0.43.0 wrote (test/fixtures/upstream-v0.43: every
 * codec, leased keys, two-put transactions, deltas cut at the memory limit, a final full) equals the `hashkv`
 * its source etcd 3.5.16 reported at the end (the README's table; that etcd never compacted). The members
 * here are the recorded answers: what etcd said, not what our code computes. A chain whose full `compact`
 * wrote (compacted at its head) is not comparable with that never-compacted etcd: "inconclusive".
 */
import { describe, expect, it } from 'vitest';
import { runHashDrill } from '../../src/verifier/hash-drill.js';
import type { EtcdHashSource } from '../../src/verifier/member-source.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { UPSTREAM_V043 } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';

const cleanups = cleanupAfterEach();

/** test/fixtures/upstream-v0.43/README.md: the source's final revision and `etcdctl endpoint hashkv` there. */
const SOURCE: Record<string, { revision: number; hashkv: number }> = {
  gzip: { revision: 2314, hashkv: 3555399906 },
  'final-gzip': { revision: 3112, hashkv: 2206287826 },
  'compacted-gzip': { revision: 2838, hashkv: 2405663007 },
  none: { revision: 2301, hashkv: 1926150403 },
  lzw: { revision: 2301, hashkv: 2224665802 },
  zlib: { revision: 2301, hashkv: 2086958072 },
};

/** The source etcd as it answered at the end: HashKV only at its final revision, never compacted. */
function recordedSource(name: string): EtcdHashSource {
  const { revision, hashkv } = SOURCE[name]!;
  return {
    endpoint: `source of ${name}`,
    status: () => Promise.resolve({ revision, dbSize: 0 }),
    hashKv: (at) => {
      if (at !== revision) return Promise.reject(new Error(`only the final revision ${revision} was recorded, not ${at}`));
      return Promise.resolve({ hash: hashkv, compactRevision: -1, headerRevision: revision });
    },
  };
}

async function drill(name: string) {
  const root = join(await cleanups.tempDir('etcdbr-upstream-hash-'), 'store');
  cpSync(join(UPSTREAM_V043, name, 'snapstore'), root, { recursive: true });
  const tmp = await cleanups.tempDir('etcdbr-upstream-hash-tmp-');
  const store = await openLocalStore(root, tmp);
  cleanups.push(() => store.close());
  return runHashDrill(store, [recordedSource(name)], { tempDir: tmp, maxFetchers: 3 });
}

describe("the drill's HashKV of Go-written chains equals their source etcd's", () => {
  it.each(['gzip', 'final-gzip', 'none', 'lzw', 'zlib'])('%s', async (name) => {
    const r = await drill(name);
    expect(r.members).toEqual([expect.objectContaining({ etcdHash: SOURCE[name]!.hashkv, storeHash: SOURCE[name]!.hashkv, equal: true })]);
    expect(r).toMatchObject({ outcome: 'match', revision: SOURCE[name]!.revision });
  });

  it('compacted-gzip: the newest full was compacted at its head, the source never: inconclusive', async () => {
    const r = await drill('compacted-gzip');
    expect(r.outcome).toBe('inconclusive');
    expect(r.reason).toMatch(/was compacted at revision \d+, above etcd's compaction revision -1/);
  });
});
