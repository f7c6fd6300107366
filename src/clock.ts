/**
 * Time source for components that schedule work (snapshotter timers, cron ticks, GC, backoff). Production code
 * gets `systemClock`; tests pass a `FakeClock` and move time forward explicitly instead of sleeping.
 */
import { EtcdbrError } from './errors.js';

/** Opaque handle returned by `Clock.setTimeout`; only meaningful to the clock that created it. */
export interface TimerHandle {
  readonly [timerBrand]: true;
}
declare const timerBrand: unique symbol;

export interface Clock {
  now(): Date;
  /** Runs `fn` once after `ms` milliseconds (negative or NaN ⇒ as soon as possible). */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  /** Cancels a pending timer; unknown or already fired handles are ignored. */
  clearTimeout(handle: TimerHandle): void;
  /**
   * Resolves after `ms` milliseconds. If `signal` is (or becomes) aborted the promise rejects with
   * `signal.reason` right away, the way `node:timers/promises` does, so callers stop waiting at shutdown.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** Node clamps longer delays to 1 ms (TimeoutOverflowWarning), so long waits are chained in slices. */
const MAX_NODE_DELAY = 2_147_483_647;

class SystemTimer {
  current: NodeJS.Timeout | undefined;
  cancelled = false;
}

export const systemClock: Clock = {
  now: () => new Date(),
  setTimeout(fn, ms) {
    const timer = new SystemTimer();
    // A monthly or yearly cron tick is more than 24.8 days away; re-arm until the real deadline is reached.
    const deadline = Date.now() + (Number.isFinite(ms) && ms > 0 ? ms : 0);
    const arm = (): void => {
      const remaining = Math.max(0, deadline - Date.now());
      timer.current = setTimeout(
        () => {
          if (timer.cancelled) return;
          if (deadline - Date.now() > 0 && remaining > MAX_NODE_DELAY) arm();
          else fn();
        },
        Math.min(remaining, MAX_NODE_DELAY),
      );
    };
    arm();
    return timer as unknown as TimerHandle;
  },
  clearTimeout(handle) {
    if (!(handle instanceof SystemTimer)) return;
    handle.cancelled = true;
    if (handle.current !== undefined) clearTimeout(handle.current);
  },
  sleep: (ms, signal) => sleepWith(systemClock, ms, signal),
};

function sleepWith(clock: Clock, ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = (): void => {
      clock.clearTimeout(handle);
      reject(abortReason(signal as AbortSignal));
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}

class FakeTimer {
  constructor(
    readonly due: number,
    readonly seq: number,
    readonly fn: () => void,
  ) {}
}

/**
 * Manually driven clock. Time only moves through `advance`/`advanceAsync`/`set`; due timers then run in order
 * of due time (ties in scheduling order), including timers that other timers schedule within the advanced span.
 */
export class FakeClock implements Clock {
  private current: number;
  private seq = 0;
  private timers: FakeTimer[] = [];

  constructor(start: Date | number | string = 0) {
    this.current = new Date(start).getTime();
    if (Number.isNaN(this.current)) throw new EtcdbrError('E_INVALID_INPUT', `FakeClock: invalid start time ${String(start)}`);
  }

  now(): Date {
    return new Date(this.current);
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const delay = Number.isFinite(ms) && ms > 0 ? ms : 0;
    const timer = new FakeTimer(this.current + delay, this.seq++, fn);
    this.timers.push(timer);
    return timer as unknown as TimerHandle;
  }

  clearTimeout(handle: TimerHandle): void {
    const i = this.timers.indexOf(handle as unknown as FakeTimer);
    if (i >= 0) this.timers.splice(i, 1);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleepWith(this, ms, signal);
  }

  /** Number of timers not yet fired or cleared. */
  get pending(): number {
    return this.timers.length;
  }

  /** When the earliest pending timer is due, if any. */
  nextDue(): Date | undefined {
    const t = this.earliest();
    return t === undefined ? undefined : new Date(t.due);
  }

  /** Moves time forward by `ms`, synchronously running every timer that falls due on the way. */
  advance(ms: number): void {
    const target = this.current + Math.max(0, ms);
    for (let t = this.takeDue(target); t !== undefined; t = this.takeDue(target)) {
      this.current = t.due;
      t.fn();
    }
    this.current = target;
  }

  /**
   * Like `advance`, but lets promise continuations run before and after each timer, so async code woken by a
   * timer (e.g. after `await clock.sleep()`) can schedule its next timer and still have it fire within `ms`.
   */
  async advanceAsync(ms: number): Promise<void> {
    const target = this.current + Math.max(0, ms);
    await flush();
    for (let t = this.takeDue(target); t !== undefined; t = this.takeDue(target)) {
      this.current = t.due;
      t.fn();
      await flush();
    }
    this.current = target;
    await flush();
  }

  /** Jumps to an absolute time (never backwards), running due timers like `advance`. */
  set(time: Date | number): void {
    this.advance(new Date(time).getTime() - this.current);
  }

  private earliest(): FakeTimer | undefined {
    let best: FakeTimer | undefined;
    for (const t of this.timers) {
      if (best === undefined || t.due < best.due || (t.due === best.due && t.seq < best.seq)) best = t;
    }
    return best;
  }

  private takeDue(target: number): FakeTimer | undefined {
    const t = this.earliest();
    if (t === undefined || t.due > target) return undefined;
    this.timers.splice(this.timers.indexOf(t), 1);
    return t;
  }
}

/** One macrotask turn: every queued microtask (promise continuation) runs before it completes. */
function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
