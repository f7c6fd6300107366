/**
 * The server's secondary backup sync between real stores (Local, S3 on s3rver, S3 behind a switchable
 * faulty proxy), driven by a fake clock: a first round copies everything (`.final` dropped), a second one
 * nothing, later snapshots go in the next round; rounds are scheduled start to start; the secondary GC
 * applies the policy and never runs during a round; an abort mid-copy commits nothing partial; an
 * unreachable secondary or a bad object fails the round (logged, counted) and the next round retries.
 */
import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { GcResult, Logger, SnapStore, Snapshot } from '@etcdbrctl/snapstore';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import { S3RVER_CREDENTIALS, startS3rver, UPLOAD_PART_MARKER, type S3rverInstance } from '../../snapstore/test/support/s3rver.js';
import { commandFlagSet } from '../../src/cli/help.js';
import { FakeClock } from '../../src/clock.js';
import { buildCommandConfig } from '../../src/config/build.js';
import { COMMAND_SPECS } from '../../src/config/commands.js';
import { buildStoreConfig } from '../../src/config/store.js';
import {
  SecondarySync,
  secondarySyncFromConfig,
  type SecondarySyncConfig,
  type SecondarySyncDeps,
  type SyncRound,
} from '../../src/copier/secondary-sync.js';
import { Metrics } from '../../src/metrics.js';
import { startFaultyStoreProxy } from '../../e2e/support/faulty-store.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { bytesOf, putSnapshot, testStores, withFetchProgress } from './support.js';
import { waitFor } from '../support/wait.js';

const MiB = 1024 * 1024;
const HOUR = 60 * 60 * 1000;
const T0 = new Date('2027-03-01T10:00:00Z');

const cleanups = cleanupAfterEach();

let s3rverStarted: Promise<S3rverInstance> | undefined;
const s3rver = () => (s3rverStarted ??= startS3rver({ bucket: 'sync' }));
afterAll(async () => {
  if (s3rverStarted) await (await s3rverStarted).stop();
});

const tempDir = (tag: string) => cleanups.tempDir(`etcdbr-secsync-${tag}-`);

const { base, local, s3 } = testStores(cleanups, 'sync', s3rver);

interface LogLine {
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}
function recordingLogger(): Logger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at = (level: string) => (obj: object | string, msg?: string) => {
    if (typeof obj === 'string') lines.push({ level, msg: obj, fields: {} });
    else lines.push({ level, msg: msg ?? '', fields: obj as Record<string, unknown> });
  };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** Values pushed by callbacks, awaited one by one in order. */
function queue<T>() {
  const items: T[] = [];
  const waiters: Array<(t: T) => void> = [];
  return {
    push(t: T): void {
      const w = waiters.shift();
      if (w) w(t);
      else items.push(t);
    },
    next(): Promise<T> {
      const t = items.shift();
      return t !== undefined ? Promise.resolve(t) : new Promise<T>((resolve) => waiters.push(resolve));
    },
    get queued(): number {
      return items.length;
    },
  };
}

/** Name without `.final` → sha256 of the stored bytes. */
async function contents(store: SnapStore): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const s of await store.list())
    out.set(
      s.snapName.replace(/\.final$/, ''),
      createHash('sha256')
        .update(await bytesOf(store, s))
        .digest('hex'),
    );
  return out;
}

const minutes = (n: number) => new Date(T0.getTime() - n * 60_000);
const NO_GC = { policy: 'LimitBased' as const, maxBackups: 7, deltaRetentionMs: 0, periodMs: 0 };

interface Harness {
  sync: SecondarySync;
  clock: FakeClock;
  logger: ReturnType<typeof recordingLogger>;
  metrics: Metrics;
  rounds: ReturnType<typeof queue<SyncRound>>;
  collected: ReturnType<typeof queue<GcResult | undefined>>;
  events: string[];
  /** Starts run(); `stop()` aborts it and waits for it to end. */
  start(): { stop(reason?: unknown): Promise<void>; abort: AbortController; done: Promise<void> };
}

function harness(config: SecondarySyncConfig, deps: Pick<SecondarySyncDeps, 'primary' | 'secondary'>): Harness {
  const clock = new FakeClock(T0);
  const logger = recordingLogger();
  const metrics = new Metrics({ defaultMetrics: false });
  const rounds = queue<SyncRound>();
  const collected = queue<GcResult | undefined>();
  const events: string[] = [];
  const sync = new SecondarySync(config, {
    ...deps,
    clock,
    logger,
    metrics,
    onRound: (r) => {
      events.push(`round:${r.status}`);
      rounds.push(r);
    },
    onCollected: (r) => {
      events.push('gc');
      collected.push(r);
    },
  });
  return {
    sync,
    clock,
    logger,
    metrics,
    rounds,
    collected,
    events,
    start() {
      const abort = new AbortController();
      const done = sync.run(abort.signal);
      let stopped = false;
      const stop = async (reason?: unknown) => {
        if (!stopped) abort.abort(reason ?? new Error('leadership lost'));
        stopped = true;
        await done;
      };
      cleanups.push(() => stop());
      return { stop, abort, done };
    },
  };
}

async function failureLabels(metrics: Metrics): Promise<Array<[string, number]>> {
  // Upstream pre-initialises error="" at zero.
  return (await metrics.snapshotterFailure.get()).values.filter((v) => v.value > 0).map((v) => [String(v.labels.error), v.value]);
}

describe('sync rounds', () => {
  it('Local → S3: everything at once (.final dropped), nothing again, new snapshots in the next round', async () => {
    const dir = await tempDir('rounds');
    const primary = await local(join(dir, 'primary'), dir);
    const secondary = await s3('rounds/v2', dir);
    await putSnapshot(primary, 'Full', 0, 10, minutes(50), { suffix: '.gz' });
    await putSnapshot(primary, 'Incr', 11, 15, minutes(45));
    await putSnapshot(primary, 'Incr', 16, 20, minutes(40), { suffix: '.zlib' });
    const final = await putSnapshot(primary, 'Full', 0, 30, minutes(30), { suffix: '.gz', isFinal: true });
    expect(final.snapName.endsWith('.gz.final')).toBe(true);

    const h = harness({ periodMs: HOUR, gc: NO_GC }, { primary: async () => primary, secondary: async () => secondary });
    const run = h.start();

    const first = await h.rounds.next();
    expect(first.status).toBe('synced');
    if (first.status !== 'synced') return;
    expect(first.result.copied).toHaveLength(4);
    expect(await contents(secondary)).toEqual(await contents(primary));
    const listed = await secondary.list();
    expect(listed.filter((s) => s.isFinal)).toEqual([]);
    expect(listed.map((s) => s.snapName)).toContain(final.snapName.replace(/\.final$/, ''));

    // Nothing more until one period after the first round started.
    await h.clock.advanceAsync(HOUR - 1);
    expect(h.rounds.queued).toBe(0);
    expect(h.clock.nextDue()).toEqual(new Date(T0.getTime() + HOUR));
    await h.clock.advanceAsync(1);
    const second = await h.rounds.next();
    expect(second.status === 'synced' && second.result.copied).toEqual([]);
    expect(second.status === 'synced' && second.result.skipped).toHaveLength(4);

    const delta = await putSnapshot(primary, 'Incr', 31, 40, minutes(10), { suffix: '.gz' });
    await h.clock.advanceAsync(HOUR);
    const third = await h.rounds.next();
    expect(third.status === 'synced' && third.result.copied.map((s) => s.snapName)).toEqual([delta.snapName]);
    expect(await contents(secondary)).toEqual(await contents(primary));

    await run.stop();
    expect(h.clock.pending).toBe(0);
    expect(await failureLabels(h.metrics)).toEqual([]);
    expect(h.logger.lines.filter((l) => l.msg === 'secondary backup sync round finished')).toHaveLength(3);
    // The copier's lines say which sync they belong to.
    expect(h.logger.lines.find((l) => l.msg.startsWith('Copying'))?.fields.sync).toBe('secondary');
  });

  it('schedules start to start: a round that overran its period is followed by the next at once', async () => {
    const dir = await tempDir('overrun');
    const primary = await local(join(dir, 'primary'), dir);
    const secondary = await local(join(dir, 'secondary'), dir);
    await putSnapshot(primary, 'Full', 0, 10, minutes(5));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const h = harness(
      { periodMs: HOUR, gc: NO_GC },
      {
        primary: async () => {
          // The first round is held until the clock went past its period.
          if (calls++ === 0) await gate;
          return primary;
        },
        secondary: async () => secondary,
      },
    );
    const run = h.start();
    await h.clock.advanceAsync(HOUR + 5 * 60_000);
    expect(h.rounds.queued).toBe(0);
    release();
    expect((await h.rounds.next()).status).toBe('synced');
    // No clock movement needed for the second round; the third is one period after the second started.
    expect((await h.rounds.next()).status).toBe('synced');
    await h.clock.advanceAsync(0);
    expect(h.clock.nextDue()).toEqual(new Date(T0.getTime() + 2 * HOUR + 5 * 60_000));
    await run.stop();
  });

  it('an abort mid-copy ends the run and leaves no partial object in the secondary', async () => {
    const dir = await tempDir('abort');
    const inner = await local(join(dir, 'primary'), dir);
    await putSnapshot(inner, 'Full', 0, 10, minutes(50));
    await putSnapshot(inner, 'Incr', 11, 20, minutes(40));
    // Three 5 MiB parts on S3: the abort hits an upload that has sent parts already.
    const big = await putSnapshot(inner, 'Full', 0, 500, minutes(10), { size: 12 * MiB });
    const secondary = await s3('abort/v2', dir);
    const server = await s3rver();

    let run!: ReturnType<Harness['start']>;
    const primary = withFetchProgress(inner, big.snapName, (seen) => {
      // Leadership ends when half of the big object went through.
      if (seen >= 6 * MiB && !run.abort.signal.aborted) run.abort.abort(new Error('leadership lost'));
    });
    const h = harness(
      { periodMs: HOUR, gc: { ...NO_GC, periodMs: 60_000 } },
      { primary: async () => primary, secondary: async () => secondary },
    );
    run = h.start();
    expect((await h.rounds.next()).status).toBe('aborted');
    await run.done;

    expect(run.abort.signal.aborted).toBe(true);
    expect(h.clock.pending).toBe(0);
    const visible = await contents(secondary);
    expect(visible.has(big.snapName)).toBe(false);
    const source = await contents(inner);
    for (const [name, hash] of visible) expect(source.get(name)).toBe(hash);
    // s3rver cannot abort multipart uploads (405), so parts may stay; no object was completed from them.
    const objects = (await server.rawKeys()).filter((k) => k.startsWith('abort/') && !k.includes(UPLOAD_PART_MARKER));
    expect(objects.some((k) => k.endsWith(big.snapName))).toBe(false);
    expect(await failureLabels(h.metrics)).toEqual([]);
    expect(h.logger.lines.map((l) => l.msg)).toContain('secondary backup sync round interrupted; copies in flight were not committed');
  });
});

describe('failed rounds', () => {
  it('an unreachable secondary: logged, counted, retried and completed in the next round', async () => {
    const dir = await tempDir('unreachable');
    const primary = await local(join(dir, 'primary'), dir);
    await putSnapshot(primary, 'Full', 0, 10, minutes(50), { suffix: '.gz' });
    await putSnapshot(primary, 'Incr', 11, 20, minutes(40));
    const server = await s3rver();
    const proxy = await startFaultyStoreProxy(server.endpoint);
    cleanups.push(() => proxy.stop());
    proxy.setMode('down');
    const viaProxy = await openS3Store(
      { ...base('unreachable/v2', dir), provider: 'S3', endpointOverride: proxy.endpoint, credentials: S3RVER_CREDENTIALS },
      { maxAttempts: 2, partRetries: 1, partRetryBaseDelayMs: 20, connectionTimeoutMs: 2_000 },
    );
    cleanups.push(() => viaProxy.close());

    const h = harness({ periodMs: HOUR, gc: NO_GC }, { primary: async () => primary, secondary: async () => viaProxy });
    const run = h.start();
    const failed = await h.rounds.next();
    expect(failed.status).toBe('failed');
    expect(proxy.faulted.down).toBeGreaterThan(0);
    const labels = await failureLabels(h.metrics);
    expect(labels).toHaveLength(1);
    expect(labels[0]?.[0]).toMatch(/^secondary backup sync: /);
    expect(labels[0]?.[1]).toBe(1);
    const logged = h.logger.lines.find(
      (l) => l.level === 'error' && l.msg.startsWith('secondary backup sync round failed; retrying next period'),
    );
    expect(logged?.fields.retryInMs).toBe(HOUR);

    proxy.setMode('up');
    await h.clock.advanceAsync(HOUR);
    const retried = await h.rounds.next();
    expect(retried.status === 'synced' && retried.result.copied).toHaveLength(2);
    expect(await contents(viaProxy)).toEqual(await contents(primary));
    await run.stop();
  });

  it('an object that cannot be copied fails the round with a bounded metric label; the rest is copied', async () => {
    const dir = await tempDir('corrupt');
    const root = join(dir, 'primary');
    const primary = await local(root, dir);
    const full = await putSnapshot(primary, 'Full', 0, 10, minutes(50));
    const bad = await putSnapshot(primary, 'Incr', 11, 20, minutes(40));
    const file = join(root, 'v2', bad.snapName);
    const bytes = await readFile(file);
    bytes[3] = (bytes[3] as number) ^ 0x20;
    await writeFile(file, bytes);
    const secondary = await local(join(dir, 'secondary'), dir);

    const h = harness({ periodMs: HOUR, gc: NO_GC }, { primary: async () => primary, secondary: async () => secondary });
    const run = h.start();
    const round = await h.rounds.next();
    expect(round.status).toBe('failed');
    expect(round.status === 'failed' && round.error.message).toContain(bad.snapName);
    expect((await secondary.list()).map((s) => s.snapName)).toEqual([full.snapName]);
    await h.clock.advanceAsync(HOUR);
    expect((await h.rounds.next()).status).toBe('failed');
    expect(await failureLabels(h.metrics)).toEqual([['secondary backup sync: some snapshots could not be copied', 2]]);
    await run.stop();
  });
});

describe('a primary that changes under a round', () => {
  it('an object deleted from the primary (its GC) after the listing is no failure', async () => {
    const dir = await tempDir('vanished');
    const inner = await local(join(dir, 'primary'), dir);
    const full = await putSnapshot(inner, 'Full', 0, 10, minutes(50));
    const gone = await putSnapshot(inner, 'Incr', 11, 20, minutes(40));
    const kept = await putSnapshot(inner, 'Incr', 21, 30, minutes(30));
    // The primary's GC deletes one delta right after the round listed it.
    const primary: SnapStore = Object.assign(Object.create(inner) as SnapStore, {
      list: async (...args: Parameters<SnapStore['list']>) => {
        const listed = await inner.list(...args);
        const victim = listed.find((s) => s.snapName === gone.snapName);
        if (victim) await inner.delete(victim);
        return listed;
      },
    });
    const secondary = await local(join(dir, 'secondary'), dir);
    const h = harness({ periodMs: HOUR, gc: NO_GC }, { primary: async () => primary, secondary: async () => secondary });
    const run = h.start();
    const round = await h.rounds.next();
    expect(round.status).toBe('synced');
    expect((await secondary.list()).map((s) => s.snapName)).toEqual([full.snapName, kept.snapName]);
    expect(await failureLabels(h.metrics)).toEqual([]);
    expect(h.logger.lines.find((l) => l.msg.includes('deleted from the primary meanwhile'))?.fields.vanished).toEqual([gone.snapName]);
    await run.stop();
  });
});

describe('garbage collection of the secondary store', () => {
  it('applies the policy after the round it waited for (LimitBased, 2 backups)', async () => {
    const dir = await tempDir('gc');
    const primary = await local(join(dir, 'primary'), dir);
    const secondary = await s3('gc/v2', dir);
    const made: Snapshot[] = [];
    for (let i = 0; i < 3; i++) {
      made.push(await putSnapshot(primary, 'Full', 0, 100 * (i + 1), minutes(60 - 20 * i), { suffix: '.gz' }));
      made.push(await putSnapshot(primary, 'Incr', 100 * (i + 1) + 1, 100 * (i + 1) + 50, minutes(55 - 20 * i)));
    }
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const h = harness(
      { periodMs: HOUR, gc: { policy: 'LimitBased', maxBackups: 2, deltaRetentionMs: 0, periodMs: 60_000 } },
      {
        primary: async () => {
          if (calls++ === 0) await gate;
          return primary;
        },
        secondary: async () => secondary,
      },
    );
    const run = h.start();
    // The GC timer falls due while the first round is still held: the pass must wait for the round.
    await h.clock.advanceAsync(60_000);
    expect(h.events).toEqual([]);
    release();
    expect((await h.rounds.next()).status).toBe('synced');
    const gc = await h.collected.next();
    expect(h.events).toEqual(['round:synced', 'gc']);

    // The oldest full and the deltas of every stream but the newest are gone.
    const [full1, delta1, full2, delta2, full3, delta3] = made as [Snapshot, Snapshot, Snapshot, Snapshot, Snapshot, Snapshot];
    expect(gc?.deleted.map((s) => s.snapName).sort()).toEqual([full1.snapName, delta1.snapName, delta2.snapName].sort());
    expect((await secondary.list()).map((s) => s.snapName)).toEqual([full2.snapName, full3.snapName, delta3.snapName]);
    // The primary is not touched.
    expect(await primary.list()).toHaveLength(6);
    const gcTotal = new Map((await h.metrics.snapshotGcTotal.get()).values.map((v) => [`${v.labels.kind}/${v.labels.succeeded}`, v.value]));
    expect(gcTotal.get('Full/true')).toBe(1);
    expect(gcTotal.get('Incr/true')).toBe(2);
    await run.stop();
  });
});

describe('secondarySyncFromConfig', () => {
  const serverConfig = (...argv: string[]) =>
    buildCommandConfig('server', { flags: commandFlagSet(COMMAND_SPECS.server).parse(argv).changed }).config;

  it('is off unless --secondary-backup-sync-enabled, and needs a primary store', async () => {
    const logger = recordingLogger();
    const common = {
      resolveSecondary: async () => undefined,
      env: {},
      clock: new FakeClock(T0),
      logger,
      metrics: new Metrics({ defaultMetrics: false }),
    };
    expect(
      secondarySyncFromConfig({
        ...common,
        config: serverConfig(),
        secondary: undefined,
        primary: async () => Promise.reject(new Error('unused')),
      }),
    ).toBeUndefined();
    const enabled = serverConfig('--secondary-backup-sync-enabled=true', '--secondary-storage-provider=Local');
    const secondary = await buildStoreConfig(enabled.secondarySnapstoreConfig.storeConfig, {
      role: 'secondary',
      env: {},
      homeDir: tmpdir(),
      createTempDir: false,
    });
    expect(secondarySyncFromConfig({ ...common, config: enabled, secondary, primary: undefined })).toBeUndefined();
    expect(logger.lines.map((l) => l.msg)).toContain(
      '--secondary-backup-sync-enabled is set but there is no primary store (--storage-provider): nothing to sync',
    );
  });

  it('S3 secondary from --secondary-* flags and SECONDARY_ credentials; period and GC policy from the flags', async () => {
    const dir = await tempDir('factory');
    const server = await s3rver();
    const credFile = join(dir, 'secondary-s3.json');
    await writeFile(credFile, JSON.stringify(S3RVER_CREDENTIALS));
    // The unprefixed variable points at nothing usable: only SECONDARY_ may be read for the secondary.
    const env = { SECONDARY_AWS_APPLICATION_CREDENTIALS_JSON: credFile, AWS_APPLICATION_CREDENTIALS_JSON: join(dir, 'missing.json') };
    const config = serverConfig(
      '--secondary-backup-sync-enabled=true',
      '--secondary-backup-sync-period=10m',
      '--secondary-storage-provider=S3',
      '--secondary-store-container=sync',
      '--secondary-store-prefix=factory',
      `--secondary-store-endpoint-override=${server.endpoint}`,
      `--secondary-snapstore-temp-directory=${dir}`,
      '--garbage-collection-policy=LimitBased',
      '--max-backups=1',
      '--garbage-collection-period=2m',
    );
    const resolveSecondary = () => buildStoreConfig(config.secondarySnapstoreConfig.storeConfig, { role: 'secondary', env, homeDir: dir });
    const primary = await local(join(dir, 'primary'), dir);
    const older = await putSnapshot(primary, 'Full', 0, 10, minutes(50));
    const newer = await putSnapshot(primary, 'Full', 0, 20, minutes(20), { suffix: '.gz' });

    const clock = new FakeClock(T0);
    const handle = secondarySyncFromConfig({
      config,
      secondary: await resolveSecondary(),
      resolveSecondary,
      env,
      primary: async () => primary,
      clock,
      logger: recordingLogger(),
      metrics: new Metrics({ defaultMetrics: false }),
    });
    expect(handle).toBeDefined();
    const abort = new AbortController();
    const done = handle!.run(abort.signal);
    cleanups.push(async () => {
      abort.abort();
      await done;
      await handle!.close();
    });
    const check = await s3('factory/v2', dir);
    const names = async () => (await check.list()).map((s) => s.snapName);
    // The first round runs at once; the 2 min GC then keeps one backup; the 10 min sync brings the old one back.
    await waitFor(async () => (await names()).length === 2, 'the first round to copy both backups');
    expect(await names()).toEqual([older.snapName, newer.snapName]);
    await clock.advanceAsync(2 * 60_000);
    await waitFor(async () => (await names()).length === 1, 'the GC to keep one backup');
    expect(await names()).toEqual([newer.snapName]);
    await clock.advanceAsync(8 * 60_000);
    await waitFor(async () => (await names()).length === 2, 'the next sync to bring the old backup back');
  });
});
