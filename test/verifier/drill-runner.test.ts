/**
 * The leader's hash drill runner on a fake clock, with the drill itself scripted (the real drill is tested
 * against etcd in kv-hash.test.ts and e2e/hash-drill.test.ts): `after-full` drills after a full snapshot, at
 * most once an hour; a cron schedule drills on its ticks; each result moves the etcdbr_backup_hash_drill_*
 * metrics it should, and a mismatch is logged with the range; scratch directories a stopped process left go.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { drillScheduleOf } from '../../src/config/drill-schedule.js';
import { Metrics } from '../../src/metrics.js';
import { HashDrillRunner, drillScheduleProblem } from '../../src/verifier/drill-runner.js';
import type { HashDrillReport } from '../../src/verifier/hash-drill.js';
import { recordingLogger } from '../restorer/support.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { waitFor } from '../support/wait.js';

const cleanups = cleanupAfterEach();
const START = '2026-11-28T10:00:00Z';
const HOUR = 3_600_000;

function report(outcome: HashDrillReport['outcome'], revision: number): HashDrillReport {
  return {
    outcome,
    revision,
    storeRevision: revision,
    base: 'Full-00000000-00000010-1',
    deltas: 1,
    members: [],
    bytes: 0,
    durationMs: 1,
    ...(outcome === 'mismatch'
      ? {
          difference: {
            endpoint: 'http://e:2379',
            fromRevision: 42,
            toRevision: 42,
            objects: ['Incr-1'],
            message: 'differs in revision 42',
          },
        }
      : {}),
    ...(outcome === 'inconclusive' ? { reason: 'nothing to compare' } : {}),
  };
}

async function runner(results: Array<HashDrillReport | Error>) {
  const clock = new FakeClock(START);
  const metrics = new Metrics({ defaultMetrics: false });
  const logger = recordingLogger();
  const tempDir = await cleanups.tempDir('etcdbr-drill-runner-');
  const started: number[] = [];
  const r = new HashDrillRunner({
    store: () => Promise.resolve({} as SnapStore),
    members: () => [],
    tempDir,
    metrics,
    clock,
    logger,
    runDrill: () => {
      started.push(clock.now().getTime());
      const next = results.shift() ?? report('match', 1);
      return next instanceof Error ? Promise.reject(next) : Promise.resolve(next);
    },
  });
  const value = async (series: string): Promise<number | undefined> => {
    const text = await metrics.registry.metrics();
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };
  return { r, clock, metrics, logger, started, tempDir, value };
}

/** Waits until `n` drills have ended (the drill's module loads and the scratch sweep take real I/O). */
async function drillsEnded(t: Awaited<ReturnType<typeof runner>>, n: number): Promise<void> {
  await waitFor(async () => ((await t.value('etcdbr_backup_hash_drill_runs_total{result="match"}')) ?? 0) >= n, `${n} drills`);
  // The loop arms its next wait once the drill's promise settled.
  await t.clock.advanceAsync(0);
}

describe('HashDrillRunner', () => {
  it('after-full: no drill before a full; one at once after the first; the next full within the hour waits for the hour', async () => {
    const t = await runner([report('match', 10), report('match', 20), report('match', 30)]);
    const stop = new AbortController();
    const loop = t.r.runOnSchedule(drillScheduleOf('after-full'), stop.signal);
    await t.clock.advanceAsync(3 * HOUR);
    expect(t.started).toEqual([]);

    t.r.fullSnapshotStored();
    await drillsEnded(t, 1);
    expect(t.started).toEqual([Date.parse(START) + 3 * HOUR]);
    expect(await t.value('etcdbr_backup_hash_drill_last_proven_revision')).toBe(10);

    await t.clock.advanceAsync(10 * 60_000);
    t.r.fullSnapshotStored();
    t.r.fullSnapshotStored(); // two fulls within the hour: one drill covers both
    await t.clock.advanceAsync(49 * 60_000);
    expect(t.started).toHaveLength(1);
    await t.clock.advanceAsync(60_000);
    await drillsEnded(t, 2);
    expect(t.started).toEqual([Date.parse(START) + 3 * HOUR, Date.parse(START) + 4 * HOUR]);
    expect(await t.value('etcdbr_backup_hash_drill_last_proven_revision')).toBe(20);
    await t.clock.advanceAsync(5 * HOUR);
    expect(t.started).toHaveLength(2);

    stop.abort();
    await loop;
  });

  it('a cron schedule drills on its ticks, fulls or not', async () => {
    const t = await runner([]);
    const stop = new AbortController();
    const loop = t.r.runOnSchedule(drillScheduleOf('TZ=UTC 0 * * * *'), stop.signal);
    for (let h = 1; h <= 3; h++) {
      await t.clock.advanceAsync(HOUR);
      await drillsEnded(t, h);
    }
    expect(t.started).toEqual([1, 2, 3].map((h) => Date.parse(START) + h * HOUR));
    stop.abort();
    await loop;
  });

  it('each result moves its metrics; a mismatch is logged with its range and leaves the proven revision', async () => {
    const t = await runner([report('match', 10), report('mismatch', 20), report('inconclusive', 30), new Error('store unreachable')]);
    await t.r.drillNow();
    await t.r.drillNow();
    await t.r.drillNow();
    await expect(t.r.drillNow()).rejects.toThrow('store unreachable');
    expect(await t.value('etcdbr_backup_hash_drill_last_proven_revision')).toBe(10);
    expect(await t.value('etcdbr_backup_hash_drill_last_proven_timestamp_seconds')).toBe(Date.parse(START) / 1000);
    expect(await t.value('etcdbr_backup_hash_drill_last_run_timestamp_seconds')).toBe(Date.parse(START) / 1000);
    for (const result of ['match', 'mismatch', 'inconclusive', 'error'])
      expect({ result, n: await t.value(`etcdbr_backup_hash_drill_runs_total{result="${result}"}`) }).toEqual({ result, n: 1 });
    expect(t.logger.warnings).toContain('hash drill: the store does NOT give back what etcd holds: differs in revision 42');
    expect(t.logger.warnings).toContain('hash drill: nothing compared: nothing to compare');
  });

  it('one drill at a time: a second caller joins the first', async () => {
    const t = await runner([report('match', 10), report('match', 11)]);
    const [a, b] = await Promise.all([t.r.drillNow(), t.r.drillNow()]);
    expect(a).toBe(b);
    expect(t.started).toHaveLength(1);
  });

  it("before its first drill it removes the scratch directories of stopped processes, its own pid's too", async () => {
    const t = await runner([]);
    const ours = `hash-drill-${process.pid}-abcdef`;
    const gone = 'hash-drill-999999999-abcdef';
    const live = `hash-drill-${process.ppid}-abcdef`;
    for (const d of [ours, gone, live, 'other']) await mkdir(join(t.tempDir, d));
    await t.r.drillNow();
    expect((await readdir(t.tempDir)).sort()).toEqual([live, 'other'].sort());
  });

  it('a sidecar that encrypts but cannot decrypt: the default is off (with the reason), an explicit schedule refused', () => {
    const writeOnly = { recipients: ['age1xyz'], identities: [] };
    expect(drillScheduleProblem('after-full', writeOnly).off).toMatch(/cannot read the backups this sidecar encrypts.*it is off/);
    expect(drillScheduleProblem('0 * * * *', writeOnly).refuse).toMatch(/^--hash-drill-schedule: the hash drill cannot read/);
    expect(drillScheduleProblem('', writeOnly)).toEqual({});
    expect(drillScheduleProblem('after-full', undefined)).toEqual({});
    expect(drillScheduleProblem('after-full', { recipients: [], identities: [] })).toEqual({});
  });
});
