/**
 * The online replay's compaction and defragmentation of its etcd (the chain passes the quota rule, so they run
 * after every delta) take the per-call deadline and the restore's signal like the transactions: a replay etcd
 * that stalls (SIGSTOP) just as the compaction is sent ends the restore with a clear error at the deadline,
 * or at once on the signal, with the data dir as it was (an existing one untouched), no `.part`, and the
 * replay etcd gone.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Logger } from '@etcdbrctl/snapstore';
import { planRestore } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { etcdBinaries } from '../support/etcd.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';
import { exists, fingerprint } from './support.js';

const COMPACTING = 'compacting the replay etcd and defragmenting';
/** The Go-written `gzip` chain's base backend alone is above 80 % of this quota (quota-rule.ts): lean runs after each delta. */
const QUOTA = 3_000_000;

const stalled: number[] = [];
afterEach(() => {
  // A failed test still ends the replay etcd it left stopped.
  for (const pid of stalled.splice(0)) signalIfAlive(pid, 'SIGKILL');
});

function signalIfAlive(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * A logger that stops the replay etcd (SIGSTOP) when the replay says it compacts it: the compaction call is
 * sent right after that line, to an etcd that no longer answers. `then` runs after that.
 */
function stallingAtCompaction(then: () => void = () => undefined): Logger & { etcdPid: () => number | undefined } {
  let pid: number | undefined;
  const info = (obj: object | string, msg?: string) => {
    if (msg === 'replay etcd started') pid = (obj as { pid: number }).pid;
    if (msg === COMPACTING && pid !== undefined && !stalled.includes(pid)) {
      process.kill(pid, 'SIGSTOP');
      stalled.push(pid);
      then();
    }
  };
  const quiet = () => undefined;
  return { debug: quiet, info, warn: quiet, error: quiet, etcdPid: () => pid };
}

async function withGzipChain(run: (dir: string, store: Awaited<ReturnType<typeof openLocalStore>>) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-lean-stall-'));
  const store = await openLocalStore(join(UPSTREAM_V023, 'gzip', 'snapstore'), dir);
  try {
    await run(dir, store);
  } finally {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  }
}

describe('online replay: a replay etcd that stalls during compaction', () => {
  it('ends the restore at the call deadline, naming the compaction; the data dir is left as it was', async () => {
    const binaries = await etcdBinaries();
    await withGzipChain(async (dir, store) => {
      const logger = stallingAtCompaction();
      // The initializer's case: an existing data dir that a successful restore would replace.
      const dataDir = join(dir, 'data');
      await mkdir(dataDir, { recursive: true });
      await writeFile(join(dataDir, 'old'), 'old data');
      const before = await fingerprint(dataDir);
      const run = executeRestore(
        store,
        planRestore(await store.list()),
        restoreOptions(binaries, dir, {
          deltaReplay: 'online',
          embeddedEtcdQuotaBytes: QUOTA,
          callTimeoutMs: 1_000,
          replaceExisting: true,
          logger,
        }),
      );
      await expect(run).rejects.toThrow(
        /^the replay etcd did not answer \(compacting at revision \d+\) within 1000 ms \(stalled or overloaded\): stopping the restore$/,
      );
      expect(await fingerprint(dataDir)).toEqual(before);
      expect(await exists(`${dataDir}.part`)).toBe(false);
      // The restore stopped its replay etcd, although it was stopped (SIGSTOP).
      expect(signalIfAlive(logger.etcdPid()!, 0)).toBe(false);
    });
  }, 60_000);

  it("ends the restore at once on the restore's signal, with the signal's reason, even with a long deadline", async () => {
    const binaries = await etcdBinaries();
    await withGzipChain(async (dir, store) => {
      const stop = new AbortController();
      const reason = new Error('stopped by the test');
      // After the compaction call went out (the logger runs just before it is sent).
      const logger = stallingAtCompaction(() => setImmediate(() => stop.abort(reason)));
      const run = executeRestore(
        store,
        planRestore(await store.list()),
        restoreOptions(binaries, dir, {
          deltaReplay: 'online',
          embeddedEtcdQuotaBytes: QUOTA,
          // Far beyond the test's timeout: only the signal can end this restore in time.
          callTimeoutMs: 3_600_000,
          signal: stop.signal,
          logger,
        }),
      );
      await expect(run).rejects.toBe(reason);
      expect(await exists(join(dir, 'data'))).toBe(false);
      expect(await exists(join(dir, 'data.part'))).toBe(false);
      expect(signalIfAlive(logger.etcdPid()!, 0)).toBe(false);
    });
  }, 60_000);
});
