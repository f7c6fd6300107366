/**
 * Full and delta snapshot leases (upstream `pkg/health/heartbeat/heartbeat.go`,
 * `pkg/snapshot/snapshotter/fullsnapshotleaseupdate.go`): the leading sidecar publishes the last revision
 * of the newest full snapshot and of the newest delta in `spec.holderIdentity` of two etcd-druid-owned Leases.
 * Druid reads them for the BackupReady condition and the compaction trigger (delta rev − full rev).
 */
import type { Logger, Snapshot } from '@etcdbrctl/snapstore';
import type { TimerHandle, Clock } from '../clock.js';
import type { KubeClient } from './client.js';
import { KubeError } from './errors.js';
import { formatMicroTime, getLease, mergePatchLease, retryOnConflict, withDeadline } from './lease.js';
import type { LeaseMergePatch, LeaseRef } from './lease.js';

/** Upstream `LeaseUpdateTimeoutDuration`: one lease update, retries included. */
export const LEASE_UPDATE_TIMEOUT_MS = 60_000;
/** Upstream `FullSnapshotLeaseUpdateInterval`: how often a failed full-lease update is retried. */
export const FULL_SNAPSHOT_LEASE_UPDATE_INTERVAL_MS = 60_000;

export interface SnapshotLeasesOptions {
  kube: KubeClient;
  /** Namespace of the leases; the CLI passes POD_NAMESPACE. */
  namespace: string;
  /** `--full-snapshot-lease-name`. */
  fullSnapshotLeaseName: string;
  /** `--delta-snapshot-lease-name`. */
  deltaSnapshotLeaseName: string;
  clock: Clock;
  logger: Logger;
  /** Deadline of one update, conflict retries included (default 60 s). */
  timeoutMs?: number;
}

export interface LeaseUpdateResult {
  /** false when the lease already held a higher revision and was left alone (full lease only). */
  patched: boolean;
  /** holderIdentity after the update. */
  holderIdentity: string | undefined;
}

/** Reads and patches the two snapshot leases. Every method throws KubeError; callers decide what is fatal. */
export class SnapshotLeases {
  private readonly full: LeaseRef;
  private readonly delta: LeaseRef;
  private readonly timeoutMs: number;

  constructor(private readonly opts: SnapshotLeasesOptions) {
    if (opts.namespace === '') throw new KubeError('E_KUBE_CONFIG', 'snapshot lease renewal needs a namespace (POD_NAMESPACE is empty)');
    this.full = { namespace: opts.namespace, name: opts.fullSnapshotLeaseName };
    this.delta = { namespace: opts.namespace, name: opts.deltaSnapshotLeaseName };
    this.timeoutMs = opts.timeoutMs ?? LEASE_UPDATE_TIMEOUT_MS;
  }

  /**
   * Upstream `UpdateFullSnapshotLease`, under RetryOnConflict: a holder that is already higher than the
   * snapshot's last revision is kept (another actor, e.g. a compaction job, published a newer full);
   * otherwise renewTime := snapshot creation time and holder := last revision when missing or lower, sent as a
   * merge patch that carries the read resourceVersion (optimistic lock).
   */
  async updateFull(snapshot: Snapshot, signal?: AbortSignal): Promise<LeaseUpdateResult> {
    const { kube, clock, logger } = this.opts;
    const ref = this.full;
    const what = `update of full snapshot lease ${ref.namespace}/${ref.name}`;
    const result = await withDeadline(
      clock,
      this.timeoutMs,
      what,
      (sig) =>
        retryOnConflict(clock, sig, async () => {
          const lease = await getLease(kube, ref, sig, 'full snapshot lease');
          const holder = lease.spec?.holderIdentity;
          const current = holder === undefined || holder === null ? undefined : parseRevision(holder, ref);
          const rev = BigInt(snapshot.lastRevision);
          if (current !== undefined && current > rev) return { patched: false, holderIdentity: holder ?? undefined };
          const patch: LeaseMergePatch = {
            metadata: { resourceVersion: lease.metadata?.resourceVersion ?? '' },
            spec: { renewTime: formatMicroTime(snapshot.createdOn) },
          };
          if (current === undefined || current < rev) (patch.spec ??= {}).holderIdentity = String(snapshot.lastRevision);
          const updated = await mergePatchLease(kube, ref, patch, sig);
          return { patched: true, holderIdentity: updated.spec?.holderIdentity ?? undefined };
        }),
      signal,
    );
    if (result.patched) {
      logger.info(
        { lease: `${ref.namespace}/${ref.name}`, holderIdentity: result.holderIdentity, renewTime: snapshot.createdOn.toISOString() },
        'Full snapshot lease renewed',
      );
    } else {
      logger.info(
        { lease: `${ref.namespace}/${ref.name}`, holderIdentity: result.holderIdentity, snapshotRevision: snapshot.lastRevision },
        'Full snapshot lease already holds a higher revision; left unchanged',
      );
    }
    return result;
  }

  /**
   * Upstream `UpdateDeltaSnapshotLease`: `deltas` are the deltas of the latest set (after the newest full,
   * ascending). renewTime := now; holder := last delta's last revision when missing or lower; "0" when there
   * are no deltas and no holder. Plain merge patch, no optimistic lock.
   */
  async updateDelta(deltas: readonly Snapshot[], signal?: AbortSignal): Promise<LeaseUpdateResult> {
    const { kube, clock, logger } = this.opts;
    const ref = this.delta;
    const what = `update of delta snapshot lease ${ref.namespace}/${ref.name}`;
    const result = await withDeadline(
      clock,
      this.timeoutMs,
      what,
      async (sig) => {
        const lease = await getLease(kube, ref, sig, 'delta snapshot lease');
        const holder = lease.spec?.holderIdentity ?? undefined;
        const patch: LeaseMergePatch = { spec: { renewTime: formatMicroTime(clock.now()) } };
        const last = deltas.at(-1);
        if (last !== undefined) {
          const current = holder === undefined ? undefined : parseRevision(holder, ref);
          if (current === undefined || current < BigInt(last.lastRevision)) (patch.spec ??= {}).holderIdentity = String(last.lastRevision);
        } else if (holder === undefined) {
          (patch.spec ??= {}).holderIdentity = '0';
        }
        const updated = await mergePatchLease(kube, ref, patch, sig);
        return {
          patched: true,
          holderIdentity: updated.spec?.holderIdentity ?? undefined,
          holderChanged: patch.spec?.holderIdentity !== undefined,
        };
      },
      signal,
    );
    // Renewed every delta period, also on an idle etcd: only a new revision is worth an info line.
    const fields = { lease: `${ref.namespace}/${ref.name}`, holderIdentity: result.holderIdentity };
    if (result.holderChanged) logger.info(fields, 'Delta snapshot lease renewed');
    else logger.debug(fields, 'Delta snapshot lease renewed');
    return { patched: result.patched, holderIdentity: result.holderIdentity };
  }
}

/** Go `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits, int64 range. Anything else is an error. */
function parseRevision(holder: string, ref: LeaseRef): bigint {
  if (/^[+-]?\d+$/.test(holder)) {
    const v = BigInt(holder);
    if (v >= -(2n ** 63n) && v < 2n ** 63n) return v;
  }
  throw new KubeError(
    'E_KUBE_BAD_OBJECT',
    `lease ${ref.namespace}/${ref.name} has holderIdentity ${JSON.stringify(holder)}, which is not a revision number; ` +
      'is the lease name shared with something else? Clear spec.holderIdentity to let etcdbrctl set it',
  );
}

export interface FullSnapshotLeaseRenewerOptions {
  leases: SnapshotLeases;
  /** The newest full snapshot known to the snapshotter (upstream `PrevFullSnapshot`), if any. */
  latestFull: () => Snapshot | undefined;
  clock: Clock;
  logger: Logger;
  /** Default 1 minute. */
  intervalMs?: number;
}

/**
 * Upstream `RenewFullSnapshotLeasePeriodically`: a timer that, when it fires and a full snapshot exists,
 * updates the full snapshot lease. Success stops the timer; failure (or no full snapshot yet) re-arms it for
 * one interval. `trigger()` after every successful full snapshot runs it at once (upstream: Reset(1ns)).
 */
export class FullSnapshotLeaseRenewer {
  private readonly intervalMs: number;
  private timer: TimerHandle | undefined;
  private inFlight: Promise<void> | undefined;
  private rerun = false;
  private stopped = true;
  private abort = new AbortController();

  constructor(private readonly opts: FullSnapshotLeaseRenewerOptions) {
    this.intervalMs = opts.intervalMs ?? FULL_SNAPSHOT_LEASE_UPDATE_INTERVAL_MS;
  }

  /** Arms the timer for one interval (upstream starts it with the snapshotter). Idempotent. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.abort = new AbortController();
    this.opts.logger.info({ intervalMs: this.intervalMs }, 'Starting the full snapshot lease renewal');
    this.arm(this.intervalMs);
  }

  /** Runs an update now (or right after the one in flight). Starts the renewer if needed. */
  trigger(): void {
    if (this.stopped) this.start();
    this.disarm();
    this.fire();
  }

  /** Clears the timer, aborts an update in flight and waits for it to end. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.rerun = false;
    this.disarm();
    this.abort.abort(new KubeError('E_KUBE_TIMEOUT', 'full snapshot lease renewal stopped'));
    await this.whenIdle();
    this.opts.logger.info({}, 'Stopped the full snapshot lease renewal');
  }

  /** Resolves when no update is running (tests: after advancing the clock). */
  async whenIdle(): Promise<void> {
    while (this.inFlight !== undefined) await this.inFlight;
  }

  /** Whether the timer is armed, i.e. an update is still owed. */
  get pending(): boolean {
    return this.timer !== undefined;
  }

  private arm(ms: number): void {
    this.disarm();
    if (this.stopped) return;
    this.timer = this.opts.clock.setTimeout(() => {
      this.timer = undefined;
      this.fire();
    }, ms);
  }

  private disarm(): void {
    if (this.timer !== undefined) this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private fire(): void {
    if (this.stopped) return;
    if (this.inFlight !== undefined) {
      this.rerun = true;
      return;
    }
    this.inFlight = this.run().finally(() => {
      this.inFlight = undefined;
      if (this.rerun && !this.stopped) {
        this.rerun = false;
        this.disarm();
        this.fire();
      }
    });
  }

  private async run(): Promise<void> {
    const { leases, latestFull, logger } = this.opts;
    const snapshot = latestFull();
    if (snapshot === undefined) {
      // No full snapshot yet: nothing to publish; look again after one interval.
      this.arm(this.intervalMs);
      return;
    }
    try {
      await leases.updateFull(snapshot, this.abort.signal);
      this.disarm();
    } catch (err) {
      if (this.stopped) return;
      logger.warn(
        { err, snapshot: snapshot.snapName, retryInMs: this.intervalMs },
        `Full snapshot lease update failed; retrying in ${this.intervalMs / 1000} s`,
      );
      this.arm(this.intervalMs);
    }
  }
}

export interface SnapshotLeaseHookOptions {
  leases: SnapshotLeases;
  renewer: FullSnapshotLeaseRenewer;
  /**
   * Deltas of the latest set, read after the delta was stored or the period ended (upstream's
   * DeltaSnapshotCaseLeaseUpdate lists the store each time: `latestSet(await store.list()).deltas`).
   */
  latestDeltas: () => Promise<readonly Snapshot[]> | readonly Snapshot[];
  logger: Logger;
}

/** The snapshotter hooks that keep the snapshot leases current. Neither throws: lease failures are warnings, as upstream. */
export interface SnapshotLeaseHooks {
  /** `onSnapshot`: a full snapshot triggers the full-lease renewer, a delta updates the delta lease. */
  onSnapshot(snap: Snapshot): Promise<void>;
  /**
   * `onIdleDeltaPeriod`: a delta period that stored nothing renews the delta lease all the same (upstream
   * calls DeltaSnapshotCaseLeaseUpdate on every delta tick): renewTime := now, the holder stays unless the
   * store's latest deltas are above it (a renewal that failed before) or there is none yet ("0").
   */
  onIdleDeltaPeriod(signal: AbortSignal): Promise<void>;
}

/**
 * Builds the hooks. Delta lease updates run one at a time, in the order they were asked for: an idle
 * renewal and the update after a delta never interleave (the update of a lease with no holder yet could
 * otherwise write "0" over the revision the other just wrote).
 */
export function snapshotLeaseHooks(opts: SnapshotLeaseHookOptions): SnapshotLeaseHooks {
  let queue: Promise<unknown> = Promise.resolve();
  const updateDelta = (signal: AbortSignal | undefined, what: string): Promise<void> => {
    const run = queue.then(async () => {
      try {
        await opts.leases.updateDelta(await opts.latestDeltas(), signal);
      } catch (err) {
        // The snapshotter stopped (leadership lost, shutdown): not a failure worth a warning.
        if (signal?.aborted === true) opts.logger.debug({ err }, 'Delta snapshot lease renewal aborted: the snapshotter stopped');
        else opts.logger.warn({ err, ...(what === '' ? {} : { snapshot: what }) }, 'Delta snapshot lease update failed');
      }
    });
    queue = run;
    return run;
  };
  return {
    onSnapshot: async (snap) => {
      if (snap.kind === 'Full') {
        opts.renewer.trigger();
        return;
      }
      await updateDelta(undefined, snap.snapName);
    },
    onIdleDeltaPeriod: (signal) => updateDelta(signal, ''),
  };
}
