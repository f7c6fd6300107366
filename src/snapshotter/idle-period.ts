import type { Logger } from '@etcdbrctl/snapstore';
import { SnapshotterStoppedError } from './snapshotter-errors.js';

/**
 * Reports delta periods that stored nothing to `onIdleDeltaPeriod` (the delta lease renewal), beside the
 * snapshot queue: an idle period does not hold it while a slow API server answers. At most one call runs at
 * a time: a period that ends while the previous call still runs is skipped.
 */
export class IdlePeriodReporter {
  /** The call in flight, if any, and how to abort it. */
  private call: { abort: AbortController; done: Promise<void> } | undefined;

  constructor(
    private readonly hook: ((signal: AbortSignal) => Promise<void> | void) | undefined,
    private readonly logger: Logger,
  ) {}

  /** `until` also ends the call (the supervisor's term, for the start-up catch-up before `run`). */
  report(until?: AbortSignal): void {
    const hook = this.hook;
    if (!hook) return;
    if (this.call) {
      this.logger.debug({}, 'Delta period ended while the previous one is still being reported; skipping this one');
      return;
    }
    const abort = new AbortController();
    const onUntil = (): void => abort.abort(until?.reason);
    if (until?.aborted) return;
    until?.addEventListener('abort', onUntil, { once: true });
    const call = { abort, done: Promise.resolve() };
    call.done = (async () => {
      try {
        await hook(abort.signal);
      } catch (err) {
        this.logger.warn({ err }, 'post-delta-period hook failed');
      } finally {
        until?.removeEventListener('abort', onUntil);
        if (this.call === call) this.call = undefined;
      }
    })();
    this.call = call;
  }

  /** Aborts the call in flight and waits for it to end. */
  async end(): Promise<void> {
    const call = this.call;
    if (!call) return;
    call.abort.abort(new SnapshotterStoppedError('snapshotter stopped'));
    await call.done;
  }
}
