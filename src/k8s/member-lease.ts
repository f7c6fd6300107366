/**
 * Member lease heartbeat (upstream `pkg/health/heartbeat/heartbeat.go` `RenewMemberLeasePeriodically`): every heartbeat period each
 * sidecar writes `<memberID hex>:<clusterID hex>:Leader|Member` and the time into the Lease named after its
 * member, plus whether its peer URLs use TLS. etcd-druid derives member readiness and roles from it.
 */
import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock, TimerHandle } from '../clock.js';
import type { KubeClient } from './client.js';
import { KubeError } from './errors.js';
import { formatMicroTime, getLease, mergePatchLease, withDeadline } from './lease.js';
import type { LeaseRef } from './lease.js';

/** Annotation druid reads to see whether a member's peer URLs already use TLS (MEM-10/11). */
export const PEER_URL_TLS_ENABLED_ANNOTATION = 'member.etcd.gardener.cloud/tls-enabled';

/** What etcd's Status answer says about this member (ids as lower-case hex, no 0x, no padding). */
export interface MemberIdentity {
  memberId: string;
  clusterId: string;
  /** The answering member is the one it names as leader. */
  isLeader: boolean;
}

/** upstream `member.FormatMemberIdentity`: `%x:%x:Leader` or `%x:%x:Member`. */
export function formatMemberIdentity(id: MemberIdentity): string {
  return `${hexId(id.memberId, 'member')}:${hexId(id.clusterId, 'cluster')}:${id.isLeader ? 'Leader' : 'Member'}`;
}

export interface MemberLeaseOptions {
  kube: KubeClient;
  /** POD_NAMESPACE. */
  namespace: string;
  /** The member name (POD_NAME, with the config's member-name-prefix if any): also the lease name. */
  memberName: string;
  /**
   * Asks etcd who this member is (production: Status on the first endpoint; tests: a stub). Called after the
   * lease was read, as upstream does, so a missing lease does not cost an etcd round trip.
   */
  memberIdentity: (signal: AbortSignal) => Promise<MemberIdentity>;
  /** Whether all of this member's peer URLs use https; a function is re-evaluated on every heartbeat. */
  peerTLSEnabled: boolean | (() => boolean | Promise<boolean>);
  clock: Clock;
  logger: Logger;
  /** `--k8s-heartbeat-duration` (upstream default 30 s). */
  heartbeatMs: number;
  /** Deadline of one renewal (upstream: the etcd connection timeout). */
  timeoutMs: number;
}

/** One heartbeat: read the lease, ask etcd, merge-patch holder, renewTime and the TLS annotation. Throws KubeError. */
export async function renewMemberLease(opts: MemberLeaseOptions, signal?: AbortSignal): Promise<string> {
  const ref: LeaseRef = { namespace: opts.namespace, name: opts.memberName };
  return withDeadline(
    opts.clock,
    opts.timeoutMs,
    `renewal of member lease ${ref.namespace}/${ref.name}`,
    async (sig) => {
      await getLease(opts.kube, ref, sig, 'member lease');
      let identity: MemberIdentity;
      try {
        identity = await opts.memberIdentity(sig);
      } catch (err) {
        throw new KubeError(
          'E_KUBE_REQUEST',
          `member lease ${ref.namespace}/${ref.name}: cannot get the etcd member status: ${(err as Error).message}`,
          { cause: err },
        );
      }
      const holder = formatMemberIdentity(identity);
      const tls = typeof opts.peerTLSEnabled === 'function' ? await opts.peerTLSEnabled() : opts.peerTLSEnabled;
      await mergePatchLease(
        opts.kube,
        ref,
        {
          metadata: { annotations: { [PEER_URL_TLS_ENABLED_ANNOTATION]: tls ? 'true' : 'false' } },
          spec: { holderIdentity: holder, renewTime: formatMicroTime(opts.clock.now()) },
        },
        sig,
      );
      opts.logger.debug({ lease: `${ref.namespace}/${ref.name}`, holderIdentity: holder }, 'Renewed member lease');
      return holder;
    },
    signal,
  );
}

/**
 * Upstream `RenewMemberLeasePeriodically`: the first renewal one heartbeat after start, then one heartbeat
 * after each attempt ends; failures are only warned. The server starts it, and the leader elector stops and
 * restarts it around the Unknown state.
 */
export class MemberLeaseHeartbeat {
  private timer: TimerHandle | undefined;
  private inFlight: Promise<void> | undefined;
  private running = false;
  private abort = new AbortController();

  constructor(private readonly opts: MemberLeaseOptions) {
    if (opts.heartbeatMs <= 0) throw new KubeError('E_KUBE_CONFIG', 'member lease heartbeat duration must be greater than 0');
    if (opts.namespace === '') throw new KubeError('E_KUBE_CONFIG', 'member lease renewal needs a namespace (POD_NAMESPACE is empty)');
    if (opts.memberName === '') throw new KubeError('E_KUBE_CONFIG', 'member lease renewal needs the member name (POD_NAME is empty)');
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** Idempotent. */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.abort = new AbortController();
    this.opts.logger.info(
      { lease: `${this.opts.namespace}/${this.opts.memberName}`, heartbeatMs: this.opts.heartbeatMs },
      'Started member lease renewal',
    );
    this.arm();
  }

  /** Stops the timer, aborts a renewal in flight and waits for it. Idempotent. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    if (this.timer !== undefined) this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.abort.abort(new KubeError('E_KUBE_TIMEOUT', 'member lease renewal stopped'));
    await this.whenIdle();
    this.opts.logger.info({}, 'Stopped member lease renewal');
  }

  /** Resolves when no renewal is running. */
  async whenIdle(): Promise<void> {
    while (this.inFlight !== undefined) await this.inFlight;
  }

  private arm(): void {
    this.timer = this.opts.clock.setTimeout(() => {
      this.timer = undefined;
      this.inFlight = this.beat().finally(() => {
        this.inFlight = undefined;
        if (this.running) this.arm();
      });
    }, this.opts.heartbeatMs);
  }

  private async beat(): Promise<void> {
    try {
      await renewMemberLease(this.opts, this.abort.signal);
    } catch (err) {
      if (this.running) this.opts.logger.warn({ err }, 'Member lease renewal failed');
    }
  }
}

/**
 * Whether this member ever sent a heartbeat (its lease has a holder): the initializer's fallback for "was
 * this member part of the cluster" when etcd cannot be asked (upstream `WasMemberInCluster`).
 */
export async function memberLeaseHasHolder(kube: KubeClient, ref: LeaseRef, clock: Clock, timeoutMs: number): Promise<boolean> {
  return withDeadline(clock, timeoutMs, `read of member lease ${ref.namespace}/${ref.name}`, async (sig) => {
    const lease = await getLease(kube, ref, sig, 'member lease');
    const holder = lease.spec?.holderIdentity;
    return holder !== undefined && holder !== null;
  });
}

function hexId(id: string, what: string): string {
  const v = id.toLowerCase().replace(/^0x/, '');
  if (!/^[0-9a-f]+$/.test(v)) throw new KubeError('E_KUBE_BAD_OBJECT', `etcd ${what} id ${JSON.stringify(id)} is not hexadecimal`);
  // %x prints no leading zeros.
  return BigInt(`0x${v}`).toString(16);
}
