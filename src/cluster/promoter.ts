/**
 * Learner promotion (upstream `pkg/leaderelection/leaderelection.go` `Promote` callback): the LeadershipWatcher of a follower whose local etcd is a learner calls
 * `onLearner` every reelection period; each call makes at most one promotion attempt (etcd refuses until the
 * learner is in sync, and the next period retries). A learner that stays behind is logged louder once it has
 * waited `stuckAfterMs`, naming what usually causes it.
 */
import type { Clock } from '../clock.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Metrics } from '../metrics.js';
import type { EtcdMemberStatus } from './leadership.js';
import { memberErrorKind, type MemberControl } from './members.js';

export interface LearnerPromoterOptions {
  members: Pick<MemberControl, 'promote'>;
  /** Cluster size from the etcd config; a single-node cluster has nothing to promote (upstream). */
  clusterSize: number;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** After this long as a learner, failures are logged as errors. Default 5 min. */
  stuckAfterMs?: number;
  /** Called once after a successful promotion (e.g. to drop the EtcdMember create-as-learner annotation). */
  onPromoted?: (memberId: string) => Promise<void>;
}

export class LearnerPromoter {
  private inFlight: Promise<void> | undefined;
  private learnerSince: number | undefined;
  private attempts = 0;

  constructor(private readonly opts: LearnerPromoterOptions) {}

  /** LeadershipWatcher's onStatus: keeps etcdbr_is_learner in line with what etcd reports. */
  observe(status: EtcdMemberStatus | undefined): void {
    if (!status) return;
    this.opts.metrics.isLearner.set(status.isLearner ? 1 : 0);
    if (!status.isLearner) {
      this.learnerSince = undefined;
      this.attempts = 0;
    }
  }

  /** LeadershipWatcher's onLearner; never throws, at most one attempt at a time. */
  onLearner(status: EtcdMemberStatus): void {
    if (this.opts.clusterSize <= 1 || this.inFlight) return;
    this.inFlight = this.attempt(status.memberId).finally(() => {
      this.inFlight = undefined;
    });
  }

  /** Resolves when the current attempt (if any) is done; for shutdown and tests. */
  async settle(): Promise<void> {
    await this.inFlight;
  }

  private async attempt(memberId: string): Promise<void> {
    const { logger, metrics, clock } = this.opts;
    const now = clock.now().getTime();
    const since = (this.learnerSince ??= now);
    this.attempts++;
    metrics.isLearner.set(1);
    try {
      const result = await this.opts.members.promote(memberId);
      logger.info(
        { memberId, attempts: this.attempts, learnerForSeconds: Math.round((now - since) / 1000) },
        result === 'promoted' ? 'promoted learner to a voting member' : 'member is already a voting member',
      );
      metrics.isLearner.set(0);
      this.learnerSince = undefined;
      this.attempts = 0;
      await this.opts.onPromoted?.(memberId).catch((err: unknown) => logger.warn({ err, memberId }, 'after promotion: follow-up failed'));
    } catch (err) {
      const waited = now - since;
      const stuck = waited >= (this.opts.stuckAfterMs ?? 300_000);
      const inSyncPending = memberErrorKind(err) === 'learner-not-in-sync';
      const fields = { err, memberId, attempts: this.attempts, learnerForSeconds: Math.round(waited / 1000) };
      if (stuck) {
        logger.error(
          fields,
          'learner has not caught up with the leader: promotion keeps failing. Check that the leader reaches this member on its ' +
            'peer URL, that the snapshot the leader sends fits (--max-request-bytes, disk), and the etcd log of this member',
        );
      } else if (inSyncPending) {
        logger.info(fields, 'learner is not yet in sync with the leader; will retry promotion');
      } else {
        logger.warn(fields, 'could not promote learner; will retry');
      }
    }
  }
}
