/**
 * Maintenance an operator asks for (Gardener DEP-05 ops tasks), on the leading sidecar: a rolling
 * defragmentation now (the scheduled one's attempt: followers first, the leader last, only when every
 * member answers) and an etcd history compaction to a revision (or keeping the newest N). One of each at a
 * time; the last outcome of each is kept for `GET`. Durations and outcomes go to
 * `etcdbr_maintenance_duration_seconds`.
 */
import { CodedError, EtcdbrError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { EtcdClient } from '../etcd/index.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Metrics } from '../metrics.js';
import { MaintenanceBusyError, type DefragAttemptResult } from './defrag.js';

export type MaintenanceOperation = 'defrag' | 'compact';

export interface MaintenanceOutcome {
  operation: MaintenanceOperation;
  state: 'running' | 'succeeded' | 'failed';
  startedAt: string;
  finishedAt?: string;
  /** What was done (defrag: members in order; compact: the revision), or why it failed. */
  detail: string;
  /** compact: the revision compacted to. */
  revision?: number;
}

export class MaintenanceRequestError extends CodedError {
  override readonly name = 'MaintenanceRequestError';
  readonly code = 'E_MAINTENANCE_REQUEST';
}

export interface CompactTarget {
  /** Compact to exactly this revision. */
  revision?: number;
  /** Compact to the current revision minus this many (keep the newest `keep` revisions). */
  keep?: number;
}

export interface OnDemandMaintenanceDeps {
  defragNow: (signal: AbortSignal) => Promise<DefragAttemptResult>;
  /** A client of the cluster (closed after each operation). */
  clusterClient: () => Promise<EtcdClient>;
  statusTimeoutMs: number;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
}

export class OnDemandMaintenance {
  private readonly last = new Map<MaintenanceOperation, MaintenanceOutcome>();

  constructor(private readonly deps: OnDemandMaintenanceDeps) {}

  status(): Partial<Record<MaintenanceOperation, MaintenanceOutcome>> {
    return Object.fromEntries(this.last);
  }

  async defrag(signal: AbortSignal): Promise<MaintenanceOutcome> {
    return this.run('defrag', async () => {
      const r = await this.deps.defragNow(signal);
      if (r.outcome === 'done') return { detail: `defragmented ${r.order.map((m) => m.name || m.id).join(', ')} (in this order)` };
      throw r.outcome === 'postponed' ? new EtcdbrError('E_CONFLICT', `postponed: ${r.reason}`) : new EtcdbrError('E_FAILED', r.reason);
    });
  }

  async compact(target: CompactTarget): Promise<MaintenanceOutcome> {
    if (target.revision === undefined && target.keep === undefined) throw new MaintenanceRequestError('give revision=<n> or keep=<n>');
    if (target.revision !== undefined && target.keep !== undefined) throw new MaintenanceRequestError('give revision or keep, not both');
    return this.run('compact', async () => {
      const client = await this.deps.clusterClient();
      try {
        const current = await client.currentRevision(this.deps.statusTimeoutMs);
        const revision = target.revision ?? current - target.keep!;
        if (revision < 1 || revision > current) {
          throw new MaintenanceRequestError(`cannot compact to revision ${revision}: etcd is at revision ${current}`);
        }
        await client.compact(revision, { physical: true, timeoutMs: 5 * 60_000 });
        return { detail: `compacted the history up to revision ${revision} (etcd at ${current})`, revision };
      } finally {
        client.close();
      }
    });
  }

  private async run(
    operation: MaintenanceOperation,
    work: () => Promise<{ detail: string; revision?: number }>,
  ): Promise<MaintenanceOutcome> {
    if (this.last.get(operation)?.state === 'running') throw new MaintenanceBusyError(`a ${operation} is already running`);
    const started = this.deps.clock.now();
    const outcome: MaintenanceOutcome = { operation, state: 'running', startedAt: started.toISOString(), detail: '' };
    this.last.set(operation, outcome);
    const t0 = performance.now();
    try {
      const done = await work();
      outcome.state = 'succeeded';
      outcome.detail = done.detail;
      if (done.revision !== undefined) outcome.revision = done.revision;
      this.deps.logger.info({ operation, detail: done.detail }, 'on-demand maintenance finished');
    } catch (err) {
      outcome.state = 'failed';
      outcome.detail = err instanceof Error ? err.message : String(err);
      this.deps.logger.warn({ operation, reason: outcome.detail }, 'on-demand maintenance failed');
      if (err instanceof MaintenanceBusyError || err instanceof MaintenanceRequestError) {
        this.last.delete(operation);
        throw err;
      }
    } finally {
      outcome.finishedAt = this.deps.clock.now().toISOString();
      this.deps.metrics.maintenanceDurationSeconds.observe(
        { operation, succeeded: String(outcome.state === 'succeeded') },
        (performance.now() - t0) / 1000,
      );
    }
    return outcome;
  }
}
