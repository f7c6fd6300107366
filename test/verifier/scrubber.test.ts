/**
 * The server's backup verification: the etcdbr_backup_* metrics after a scrub of a Go-written store (sound
 * and broken), one scrub at a time, the schedule on a fake clock, and the /snapshot/verify route.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { openSnapStore, type SnapStore } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { CronSchedule } from '../../src/config/schedule.js';
import { BackupScrubber, scheduledVerificationProblem } from '../../src/verifier/scrubber.js';
import { readEncryptionKeys } from '../../src/config/encryption.js';
import { encryptedUpstreamStore } from '../support/encrypted-store.js';
import type { VerifyReport } from '../../src/verifier/verify.js';
import { recordingLogger } from '../restorer/support.js';
import { Resources, request, startServer } from '../server/support.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';
import { localStoreConfig, openLocalStore } from '../support/local-store.js';
import { waitFor } from '../support/wait.js';

const res = new Resources();
afterEach(() => res.cleanup());

const LAST_DELTA_UNIX = 1795219417;

async function fixtureStore(): Promise<{ store: SnapStore; v2: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'etcdbr-scrubber-'));
  res.add(async () => rmSync(dir, { recursive: true, force: true }));
  const root = join(dir, 'store');
  cpSync(join(UPSTREAM_V023, 'gzip', 'snapstore'), root, { recursive: true });
  const store = await openLocalStore(root, dir);
  res.add(() => store.close());
  return { store, v2: join(root, 'v2') };
}

function scrubberFor(store: SnapStore, clock = new FakeClock('2026-11-25T00:00:00Z')) {
  const metrics = new Metrics({ defaultMetrics: false });
  const logger = recordingLogger();
  const scrubber = new BackupScrubber({ store: async () => store, metrics, clock, logger });
  return { scrubber, metrics, logger, clock };
}

async function metric(metrics: Metrics, name: string): Promise<string> {
  return metrics.registry.getSingleMetricAsString(name);
}

describe('BackupScrubber', () => {
  it('a sound store: the verified revision and the recovery point are exported', async () => {
    const { store } = await fixtureStore();
    const { scrubber, metrics, logger } = scrubberFor(store);
    const [a, b] = await Promise.all([scrubber.scrubNow(), scrubber.scrubNow()]);
    expect(a).toBe(b); // one scrub at a time: the second caller joined the first
    expect(a.restorable).toBe(true);
    expect(await metric(metrics, 'etcdbr_backup_last_verified_revision')).toContain('etcdbr_backup_last_verified_revision 385');
    expect(await metric(metrics, 'etcdbr_backup_latest_restorable_timestamp_seconds')).toContain(
      `etcdbr_backup_latest_restorable_timestamp_seconds ${LAST_DELTA_UNIX}`,
    );
    expect(await metric(metrics, 'etcdbr_backup_verify_failures_total')).toContain('etcdbr_backup_verify_failures_total 0');
    expect(logger.messages).toContain('backup verification: the newest chain restores');
  });

  it('a broken delta: a failure counted, logged as an error, the recovery point at the last good delta', async () => {
    const { store, v2 } = await fixtureStore();
    const file = join(v2, 'Incr-00000356-00000385-1795219417.gz');
    const payload = gunzipSync(readFileSync(file));
    payload[10] = payload[10]! ^ 0x20;
    writeFileSync(file, gzipSync(payload));
    const { scrubber, metrics, logger } = scrubberFor(store);
    const report = await scrubber.scrubNow();
    expect(report.restorable).toBe(false);
    expect(await metric(metrics, 'etcdbr_backup_verify_failures_total')).toContain('etcdbr_backup_verify_failures_total 1');
    expect(await metric(metrics, 'etcdbr_backup_last_verified_revision')).toContain('etcdbr_backup_last_verified_revision 355');
    expect(await metric(metrics, 'etcdbr_backup_latest_restorable_timestamp_seconds')).toContain(
      'etcdbr_backup_latest_restorable_timestamp_seconds 1795219415',
    );
    expect(logger.warnings).toContain('backup verification: the newest chain does NOT restore as stored');
  });

  it('encrypted backups and no identity: no verdict, so no failure counted, no error logged, no metric moved', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-scrubber-encrypted-'));
    res.add(async () => rmSync(dir, { recursive: true, force: true }));
    const { root, recipients } = await encryptedUpstreamStore('gzip', dir);
    // As docs/features.md recommends for a sidecar: the recipients to encrypt to, no identity.
    const store = await openSnapStore({
      ...localStoreConfig(root, dir),
      encryption: await readEncryptionKeys({ recipientsFile: recipients, identityFiles: [] }),
    });
    res.add(() => store.close());
    const { scrubber, metrics, logger } = scrubberFor(store);
    const report = await scrubber.scrubNow();
    expect(report.firstBroken).toBeUndefined();
    expect(report.firstUnverifiable?.problem).toMatch(/^cannot check: no identity for encrypted objects/);
    expect(await metric(metrics, 'etcdbr_backup_verify_failures_total')).toContain('etcdbr_backup_verify_failures_total 0');
    expect(await metric(metrics, 'etcdbr_backup_last_verified_revision')).toContain('etcdbr_backup_last_verified_revision 0');
    expect(logger.warnings).toEqual([
      'backup verification: cannot check the encrypted backups without an identity (--encryption-identity-file)',
    ]);
  });

  it('--verify-schedule with recipients but no identity is refused; with an identity, or without encryption, it is not', () => {
    const keys = { recipients: ['age1x'], identities: [] };
    expect(scheduledVerificationProblem('0 * * * *', keys)).toMatch(/^--verify-schedule cannot check the backups this sidecar encrypts/);
    expect(scheduledVerificationProblem('', keys)).toBeUndefined();
    expect(scheduledVerificationProblem('0 * * * *', undefined)).toBeUndefined();
    expect(scheduledVerificationProblem('0 * * * *', { recipients: [], identities: [] })).toBeUndefined();
  });

  it('runs on its schedule until stopped', async () => {
    const { store } = await fixtureStore();
    const { scrubber, metrics, clock } = scrubberFor(store);
    const stop = new AbortController();
    const running = scrubber.runOnSchedule(new CronSchedule('*/30 * * * *'), stop.signal);
    await clock.advanceAsync(10 * 60_000);
    expect(await metric(metrics, 'etcdbr_backup_last_verified_revision')).toContain('etcdbr_backup_last_verified_revision 0');
    await clock.advanceAsync(25 * 60_000); // past 00:30
    await waitFor(
      async () => ((await metric(metrics, 'etcdbr_backup_last_verified_revision')).includes(' 385') ? true : undefined),
      'the scheduled scrub',
    );
    stop.abort();
    await running;
  });
});

describe('/snapshot/verify', () => {
  it('answers the scrub report as JSON; 405 without a store', async () => {
    const { store } = await fixtureStore();
    const { scrubber } = scrubberFor(store);
    const { url } = await startServer(res, { store: () => store, scrubber });
    const a = await request(`${url}/snapshot/verify`);
    expect(a.status).toBe(200);
    const report = JSON.parse(a.body) as VerifyReport;
    expect(report.restorable).toBe(true);
    expect(report.chains[0]!.restorableRevision).toBe(385);
    const none = await startServer(res);
    const b = await request(`${none.url}/snapshot/verify`);
    expect(b.status).toBe(405);
    expect(b.body).toMatch(/no storage provider/);
  });
});
