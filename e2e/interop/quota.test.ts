/**
 * Issue 27's quota case: a chain whose restored backend passes 80 % of `--embedded-etcd-quota-bytes`.
 *
 * The two tools restore it differently, legitimately: ours compacts the restored history at the head,
 * offline, as a function of the chain and the quota (docs/how-it-works.md "How a restore works", step 4); the Go restore
 * replays every delta through its embedded etcd with that quota and keeps the whole history (v0.23's
 * restorer never compacts for size, its etcd only refuses writes past the quota itself; v0.41 and later
 * compact after every 10th delta they apply, and this chain has 3). What both
 * guarantee, and what is compared: at the head, the same keys, values, create and mod revisions, versions
 * and the same revision (and leases: ours keeps those of the keys a delta carries, the Go tool only the base's). What differs, and is checked to differ as
 * designed: an old revision is readable in the Go tool's result, compacted in ours.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterEach, describe, expect, it } from 'vitest';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries } from '../../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../../test/support/etcd-dump.js';
import { cleanupAfterEach } from '../../test/support/cleanups.js';
import { restoreFlags } from '../support/restore-dump.js';
import { backupLive } from './support/backup-live.js';
import { expectGoDropsOnlyLeases, localSnapshots, localStore, runOk, type Cleanups, type Tool } from './support/tools.js';

const after = cleanupAfterEach();
const cleanups: Cleanups = [];
// Its own hook: one pushed onto `after` would run once, after the first test, and never again (each run of
// `after` empties it), leaving every later test's etcds running. Registered after `after`'s, so it runs first.
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

/** The restored etcd's dump, and what it answers for `key` at `revision`: its value, or the error etcd gave. */
async function dumpAndReadAt(dataDir: string, key: string, revision: number): Promise<{ dump: EtcdDump; old: string }> {
  const etcd = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  const client = new Etcd3({ hosts: etcd.clientUrl });
  try {
    const dump = await dumpEtcd(etcd.clientUrl);
    const old = await client
      .get(key)
      .revision(revision)
      .string()
      .then(
        (v) => `value ${String(v)}`,
        (err: unknown) => `error ${(err as Error).message}`,
      );
    return { dump, old };
  } finally {
    client.close();
    await etcd.stop();
  }
}

describe.each<Tool>(['ours', 'go'])('a chain written by %s that passes 80 % of the quota', (writer) => {
  it('ours (offline, compacted at the head) and the Go restore agree at the head; only ours dropped the history', async () => {
    const dir = await after.tempDir(`etcdbr-interop-quota-${writer}-`);
    // Uncompressed, so the chain's size as our rule counts it is the objects' sizes; ~100 KiB values make it.
    const backup = await backupLive({ tool: writer, compression: 'none', dir, load: { keys: 20, bigValues: 40 } }, cleanups);
    const stored = await localSnapshots(backup.container);
    let chainBytes = 0;
    for (const s of stored) chainBytes += (await stat(join(backup.container, 'v2', s.name))).size;
    // The chain is 82 % of the quota: past our 80 % threshold, and the Go tool's etcd (which stores the values
    // raw, not base64 as the deltas carry them) stays below the quota itself.
    const quota = Math.floor(chainBytes / 0.82);
    const quotaFlag = `--embedded-etcd-quota-bytes=${quota}`;

    const restore = async (tool: Tool) => {
      const dataDir = join(dir, `${tool}-restored.etcd`);
      const r = await runOk(
        tool,
        [
          'restore',
          ...localStore(backup.container),
          ...restoreFlags(join(dir, `${tool}-scratch`), dataDir),
          `--snapstore-temp-directory=${dir}`,
          quotaFlag,
        ],
        {},
        cleanups,
      );
      return { ...(await dumpAndReadAt(dataDir, '/registry/r0/configmaps/hot', 3)), log: r.stdout + r.stderr };
    };
    const ours = await restore('ours');
    const go = await restore('go');

    expect(ours.dump).toEqual(backup.source);
    expectGoDropsOnlyLeases(go.dump, ours.dump);
    // The difference by design: the Go tool kept the history, ours compacted it at the head.
    expect(go.old).toMatch(/^value /);
    expect(ours.old).toMatch(/^error .*compacted/);
    expect(ours.log).toContain('pass 80 % of the quota: compacting the restored history at its newest revision');
  });
});
