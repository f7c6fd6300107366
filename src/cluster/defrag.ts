import { CodedError, EtcdbrError } from '../errors.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { EtcdConnectionConfig } from '../config/types.js';
import { createEtcdClientFromFlags, type EtcdClient } from '../etcd/index.js';
import type { Metrics } from '../metrics.js';
import { CronSchedule, isZeroTime } from '../config/schedule.js';
import { memberStatus, type EtcdMemberStatus } from './leadership.js';

/** Upstream `DefragRetryPeriod`: the wait before the first attempt and between attempts of one scheduled run. */
export const DEFRAG_RETRY_PERIOD_MS = 60_000;

/** Opens a client that talks to exactly one endpoint, so Status and Defragment reach that member only. */
export type EndpointClientFactory = (endpoint: string) => Promise<EtcdClient>;

/** Opens a client of the whole cluster (MemberList, MemberRemove). */
export type MaintenanceClientFactory = () => Promise<EtcdClient>;

/**
 * Clients for single members with the TLS and credentials of `--endpoints`: a member's Status or
 * Defragment must not be answered by whichever member a multi-host client happens to pick.
 */
export function endpointClientFactory(conn: EtcdConnectionConfig): EndpointClientFactory {
  return (endpoint) => clientFor(conn, [endpoint]);
}

/**
 * Fresh clients of `--endpoints` for the maintenance jobs. They do not share the sidecar's main client on
 * purpose: the etcd client opens a host's circuit breaker after three failed calls, and a refused MemberRemove or an
 * unreachable member must not make the leadership check fail for the next five seconds.
 */
export function endpointsClientFactory(conn: EtcdConnectionConfig): MaintenanceClientFactory {
  return () => clientFor(conn, conn.endpoints);
}

function clientFor(conn: EtcdConnectionConfig, endpoints: string[]): Promise<EtcdClient> {
  return createEtcdClientFromFlags(conn, endpoints);
}

/** A cluster member as the maintenance jobs see it: hex ID, name and the client URL used to reach it. */
export interface ClusterMember {
  id: string;
  name: string;
  /** First advertised client URL; undefined for a member that was added but never started. */
  endpoint: string | undefined;
  peerURLs: string[];
  isLearner: boolean;
}

export async function listClusterMembers(client: EtcdClient, timeoutMs: number): Promise<ClusterMember[]> {
  const res = await client.memberList({ linearizable: true, timeoutMs });
  return res.members.map((m) => ({
    id: m.id,
    name: m.name,
    endpoint: m.clientUrls[0],
    peerURLs: [...m.peerUrls],
    isLearner: m.isLearner,
  }));
}

export interface MemberProbe {
  member: ClusterMember;
  status?: EtcdMemberStatus;
  /** Why the member counts as unhealthy (no answer, not started, ...). */
  problem?: string;
}

/**
 * Asks every member for its Status, in parallel, each through its own client. A member counts as healthy
 * only if it answers in time; one that was added but never started has no client URL and is unhealthy.
 */
export async function probeMembers(
  members: ClusterMember[],
  clientFor: (endpoint: string) => Promise<EtcdClient>,
  timeoutMs: number,
): Promise<MemberProbe[]> {
  return Promise.all(
    members.map(async (member): Promise<MemberProbe> => {
      if (member.endpoint === undefined) return { member, problem: 'the member has not started (no client URL)' };
      try {
        const status = await memberStatus(await clientFor(member.endpoint), timeoutMs);
        return { member, status };
      } catch (err) {
        return { member, problem: err instanceof Error ? err.message : String(err) };
      }
    }),
  );
}

/** Caches one client per endpoint for the duration of an attempt and closes them all afterwards. */
export class EndpointClients {
  private readonly clients = new Map<string, Promise<EtcdClient>>();

  constructor(private readonly factory: EndpointClientFactory) {}

  get(endpoint: string): Promise<EtcdClient> {
    let c = this.clients.get(endpoint);
    if (c === undefined) {
      c = this.factory(endpoint);
      this.clients.set(endpoint, c);
    }
    return c;
  }

  async closeAll(): Promise<void> {
    const all = [...this.clients.values()];
    this.clients.clear();
    await Promise.all(all.map(async (c) => (await c.catch(() => undefined))?.close()));
  }
}

/** An on-demand maintenance operation asked for while one of its kind runs. */
export class MaintenanceBusyError extends CodedError {
  override readonly name = 'MaintenanceBusyError';
  readonly code = 'E_MAINTENANCE_BUSY';
}

export interface DefragRunnerOptions {
  /** Client of the cluster for MemberList, opened per attempt and closed afterwards. */
  clusterClient: MaintenanceClientFactory;
  endpointClient: EndpointClientFactory;
  /** `--defragmentation-schedule` (robfig syntax). */
  schedule: string | CronSchedule;
  /** `--etcd-defrag-timeout`, per member. */
  defragTimeoutMs: number;
  /** Timeout of MemberList and of each Status probe (`--etcd-connection-timeout`). */
  statusTimeoutMs: number;
  /** Wait before each attempt of a scheduled run (default: upstream's 1 minute). */
  retryPeriodMs?: number;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /**
   * Runs once after every member of a scheduled run was defragmented (the `snapshot` subcommand takes a
   * full snapshot here); a failure is only logged.
   */
  onDefragmented?: () => Promise<unknown>;
  /** Told the result of each member's defragmentation (EtcdMember `lastDefragmentation`); must not throw. */
  onMemberDefragmented?: (result: MemberDefragmentation) => void;
}

/** One member's defragmentation, succeeded or not. Sizes are etcd's Status before and after, when known. */
export interface MemberDefragmentation {
  /** Hex member ID. */
  memberId: string;
  name: string;
  endpoint: string;
  startTime: Date;
  endTime: Date;
  succeeded: boolean;
  message: string;
  initialDBSize?: number;
  finalDBSize?: number;
}

/** Progress of one scheduled run across its attempts. */
export interface DefragJobState {
  /** Hex IDs of the members already defragmented in this run; a retry does not defragment them again. */
  done: Set<string>;
}

export type DefragAttemptResult =
  | { outcome: 'done'; order: ClusterMember[] }
  | { outcome: 'postponed'; reason: string; unhealthy: Array<{ name: string; endpoint?: string; problem: string }> }
  | { outcome: 'failed'; reason: string };

/**
 * Rolling defragmentation of the whole cluster on the leading sidecar (upstream `pkg/defragmentor/defrag.go`;
 * etcd-druid proposal 01-multi-node-etcd-clusters.md):
 * on each cron tick (a tick while a run is still going is skipped), wait one retry period, then try until
 * one attempt succeeds, waiting a retry period between attempts. An attempt lists the members, requires
 * every one of them to answer Status and none to be a learner (checked again before each member), and
 * defragments the followers one at a time and the leader last, each through its own client and with the
 * defrag timeout. Members done in an earlier attempt of the same run are not defragmented again.
 */
export class DefragRunner {
  private readonly schedule: CronSchedule;
  private readonly retryPeriodMs: number;
  private current: Promise<void> | undefined;

  constructor(private readonly opts: DefragRunnerOptions) {
    this.schedule = typeof opts.schedule === 'string' ? new CronSchedule(opts.schedule) : opts.schedule;
    this.retryPeriodMs = opts.retryPeriodMs ?? DEFRAG_RETRY_PERIOD_MS;
  }

  /** Whether a scheduled run is in progress. */
  get running(): boolean {
    return this.current !== undefined;
  }

  /** Follows the schedule until `signal` aborts; then waits for a run in progress to notice and stop. */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.opts;
    let last = clock.now();
    while (!signal.aborted) {
      const now = clock.now();
      // Never ask for a time before the last tick: a timer that fires a little early must not fire twice.
      const next = this.schedule.next(now.getTime() < last.getTime() ? last : now);
      if (isZeroTime(next)) {
        logger.error({ schedule: this.schedule.spec }, 'the defragmentation schedule never fires: defragmentation is off');
        break;
      }
      try {
        await clock.sleep(next.getTime() - now.getTime(), signal);
      } catch {
        break;
      }
      last = next;
      if (this.current) {
        // robfig's SkipIfStillRunning, as upstream.
        logger.info({}, 'the previous defragmentation is still running: skipping this scheduled run');
        continue;
      }
      this.current = this.runJob(signal).finally(() => {
        this.current = undefined;
      });
    }
    await this.current;
  }

  /**
   * One attempt now, on demand (`POST /maintenance/defrag`): no retry period, no retry. Throws
   * MaintenanceBusyError while a scheduled or on-demand run is in progress, so two never overlap.
   */
  async defragNow(signal: AbortSignal): Promise<DefragAttemptResult> {
    if (this.current) throw new MaintenanceBusyError('a defragmentation is already running');
    let result!: DefragAttemptResult;
    this.current = (async () => {
      try {
        result = await this.attempt({ done: new Set() }, signal);
      } catch (err) {
        result = { outcome: 'failed', reason: err instanceof Error ? err.message : String(err) };
      }
    })().finally(() => {
      this.current = undefined;
    });
    await this.current;
    return result;
  }

  /** One scheduled run: attempts every retry period until one succeeds, then the callback. */
  async runJob(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.opts;
    const state: DefragJobState = { done: new Set() };
    logger.info({ retryPeriodMs: this.retryPeriodMs }, 'defragmentation is due');
    for (;;) {
      try {
        await clock.sleep(this.retryPeriodMs, signal);
      } catch {
        logger.info({}, 'defragmentation stopped before it completed');
        return;
      }
      let result: DefragAttemptResult;
      try {
        result = await this.attempt(state, signal);
      } catch (err) {
        result = { outcome: 'failed', reason: err instanceof Error ? err.message : String(err) };
      }
      if (signal.aborted) return;
      if (result.outcome === 'done') break;
      if (result.outcome === 'failed') logger.warn({ reason: result.reason }, 'defragmentation failed; retrying later');
    }
    logger.info({}, 'defragmentation of every etcd member finished');
    if (this.opts.onDefragmented) {
      try {
        await this.opts.onDefragmented();
      } catch (err) {
        logger.warn({ err }, 'the callback after defragmentation failed');
      }
    }
  }

  /**
   * One attempt. Before each member the whole cluster is probed again: any member not answering postpones
   * the rest of the run. The next member is always a follower while one is left, so the member that leads
   * at that moment goes last even if leadership moved in between.
   */
  async attempt(state: DefragJobState, signal: AbortSignal): Promise<DefragAttemptResult> {
    const { statusTimeoutMs, logger } = this.opts;
    const clients = new EndpointClients(this.opts.endpointClient);
    const order: ClusterMember[] = [];
    let client: EtcdClient | undefined;
    try {
      client = await this.opts.clusterClient();
      for (;;) {
        if (signal.aborted) return { outcome: 'failed', reason: 'stopped' };
        const members = await listClusterMembers(client, statusTimeoutMs);
        if (members.every((m) => state.done.has(m.id))) return { outcome: 'done', order };
        const probes = await probeMembers(members, (ep) => clients.get(ep), statusTimeoutMs);
        // A learner counts as not ready: etcd refuses Defragment on learners ("rpc not supported for
        // learner"), and it becomes a voting member within seconds once it caught up.
        const unhealthy = probes
          .map((p) => ({
            p,
            problem: p.problem ?? (p.member.isLearner || p.status?.isLearner ? 'the member is a learner (not yet promoted)' : undefined),
          }))
          .filter((x) => x.problem !== undefined)
          .map(({ p, problem }) => ({
            name: p.member.name || p.member.id,
            ...(p.member.endpoint !== undefined ? { endpoint: p.member.endpoint } : {}),
            problem: problem as string,
          }));
        if (unhealthy.length > 0) {
          logger.warn(
            { unhealthy, defragmented: state.done.size },
            `postponing defragmentation until every etcd member is healthy: ${unhealthy.map((u) => `${u.name}: ${u.problem}`).join('; ')}`,
          );
          return { outcome: 'postponed', reason: 'unhealthy members', unhealthy };
        }
        const leaderId = probes.map((p) => p.status?.leaderId).find((id) => id !== undefined && id !== '0');
        if (leaderId === undefined) {
          logger.warn({}, 'postponing defragmentation: the etcd cluster has no leader');
          return { outcome: 'postponed', reason: 'no leader', unhealthy: [] };
        }
        const remaining = probes.filter((p) => !state.done.has(p.member.id));
        const next = remaining.find((p) => p.member.id !== leaderId) ?? (remaining[0] as MemberProbe);
        await this.defragmentMember(next, next.member.id === leaderId, clients, signal);
        state.done.add(next.member.id);
        order.push(next.member);
      }
    } catch (err) {
      return { outcome: 'failed', reason: err instanceof Error ? err.message : String(err) };
    } finally {
      client?.close();
      await clients.closeAll();
    }
  }

  private async defragmentMember(probe: MemberProbe, isLeader: boolean, clients: EndpointClients, signal: AbortSignal): Promise<void> {
    const { defragTimeoutMs, statusTimeoutMs, logger, metrics, clock } = this.opts;
    const endpoint = probe.member.endpoint as string;
    const c = await clients.get(endpoint);
    const fields = { member: probe.member.name, endpoint, leader: isLeader };
    logger.info(fields, 'defragmenting etcd member');
    const startTime = clock.now();
    const tell = (succeeded: boolean, message: string, finalDBSize?: number): void => {
      const initialDBSize = probe.status?.dbSize;
      this.opts.onMemberDefragmented?.({
        memberId: probe.member.id,
        name: probe.member.name,
        endpoint,
        startTime,
        endTime: clock.now(),
        succeeded,
        message,
        ...(initialDBSize !== undefined ? { initialDBSize } : {}),
        ...(finalDBSize !== undefined ? { finalDBSize } : {}),
      });
    };
    const started = performance.now();
    const seconds = () => (performance.now() - started) / 1000;
    try {
      if (signal.aborted) throw new EtcdbrError('E_STOPPED', 'stopped');
      // On shutdown the call is cancelled, so a pending defragmentation (minutes on a large database) does not
      // keep the process alive; etcd finishes the defragmentation anyway.
      await c.defragment({ timeoutMs: defragTimeoutMs, signal });
    } catch (err) {
      metrics.defragmentationDurationSeconds.observe({ succeeded: 'false', endpoint }, seconds());
      logger.error({ ...fields, err }, 'defragmentation of etcd member failed');
      // Cancelled at shutdown: etcd finishes on its own, the outcome is unknown here.
      if (!signal.aborted) tell(false, `Defragmentation failed: ${err instanceof Error ? err.message : String(err)}`);
      throw new EtcdbrError(
        'E_FAILED',
        `defragmentation of ${probe.member.name || endpoint} failed: ${err instanceof Error ? err.message : String(err)}`,
        {
          cause: err,
        },
      );
    }
    metrics.defragmentationDurationSeconds.observe({ succeeded: 'true', endpoint }, seconds());
    const after = await memberStatus(c, statusTimeoutMs).catch(() => undefined);
    // The sizes are approximate: writes continue while we ask.
    logger.info(
      { ...fields, dbSizeBefore: probe.status?.dbSize, dbSizeAfter: after?.dbSize, seconds: seconds() },
      'finished defragmenting etcd member',
    );
    tell(true, 'Defragmentation succeeded', after?.dbSize);
  }
}
