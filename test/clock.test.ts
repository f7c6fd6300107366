import { afterEach, describe, expect, it, vi } from 'vitest';
import { FakeClock, systemClock } from '../src/clock.js';

describe('FakeClock', () => {
  it('starts at the given time and only moves when advanced', () => {
    const clock = new FakeClock('2024-05-10T10:00:00Z');
    expect(clock.now().toISOString()).toBe('2024-05-10T10:00:00.000Z');
    clock.advance(1500);
    expect(clock.now().toISOString()).toBe('2024-05-10T10:00:01.500Z');
    expect(() => new FakeClock('not a date')).toThrow(/invalid start/);
  });

  it('runs due timers in due order, ties in scheduling order, with now() at each due time', () => {
    const clock = new FakeClock(0);
    const seen: string[] = [];
    clock.setTimeout(() => seen.push(`c@${clock.now().getTime()}`), 300);
    clock.setTimeout(() => seen.push(`a@${clock.now().getTime()}`), 100);
    clock.setTimeout(() => seen.push(`b@${clock.now().getTime()}`), 100);
    clock.setTimeout(() => seen.push(`late@${clock.now().getTime()}`), 1000);
    clock.advance(500);
    expect(seen).toEqual(['a@100', 'b@100', 'c@300']);
    expect(clock.now().getTime()).toBe(500);
    expect(clock.pending).toBe(1);
    expect(clock.nextDue()?.getTime()).toBe(1000);
  });

  it('runs timers scheduled by timers when they fall within the advanced span', () => {
    const clock = new FakeClock(0);
    const fired: number[] = [];
    const tick = (): void => {
      fired.push(clock.now().getTime());
      clock.setTimeout(tick, 100);
    };
    clock.setTimeout(tick, 100);
    clock.advance(350);
    expect(fired).toEqual([100, 200, 300]);
    clock.setTimeout(() => fired.push(-1), 0);
    clock.advance(0);
    expect(fired).toEqual([100, 200, 300, -1]);
  });

  it('treats negative and NaN delays as zero', () => {
    const clock = new FakeClock(1000);
    const fired: number[] = [];
    clock.setTimeout(() => fired.push(1), -50);
    clock.setTimeout(() => fired.push(2), Number.NaN);
    clock.advance(0);
    expect(fired).toEqual([1, 2]);
  });

  it('clearTimeout cancels a pending timer and ignores unknown handles', () => {
    const clock = new FakeClock(0);
    const fn = vi.fn();
    const h = clock.setTimeout(fn, 10);
    clock.clearTimeout(h);
    clock.clearTimeout(h);
    clock.advance(100);
    expect(fn).not.toHaveBeenCalled();
    expect(clock.pending).toBe(0);
  });

  it('set() jumps to an absolute time running due timers', () => {
    const clock = new FakeClock('2024-01-01T00:00:00Z');
    const fn = vi.fn();
    clock.setTimeout(fn, 60_000);
    clock.set(new Date('2024-01-01T00:05:00Z'));
    expect(fn).toHaveBeenCalledOnce();
    expect(clock.now().toISOString()).toBe('2024-01-01T00:05:00.000Z');
  });

  it('sleep resolves once time is advanced past it', async () => {
    const clock = new FakeClock(0);
    let done = false;
    const p = clock.sleep(1000).then(() => {
      done = true;
    });
    clock.advance(999);
    await Promise.resolve();
    expect(done).toBe(false);
    clock.advance(1);
    await p;
    expect(done).toBe(true);
  });

  it('sleep rejects with the abort reason, immediately if already aborted', async () => {
    const clock = new FakeClock(0);
    const ac = new AbortController();
    const p = clock.sleep(1000, ac.signal);
    ac.abort(new Error('stop'));
    await expect(p).rejects.toThrow('stop');
    expect(clock.pending).toBe(0);
    await expect(clock.sleep(10, ac.signal)).rejects.toThrow('stop');
    const plain = new AbortController();
    plain.abort();
    await expect(clock.sleep(10, plain.signal)).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('advanceAsync lets async loops re-arm their sleeps within the span', async () => {
    const clock = new FakeClock(0);
    const wakeups: number[] = [];
    const ac = new AbortController();
    const loop = (async () => {
      for (;;) {
        await clock.sleep(1000, ac.signal);
        wakeups.push(clock.now().getTime());
      }
    })().catch(() => undefined);
    await clock.advanceAsync(3500);
    expect(wakeups).toEqual([1000, 2000, 3000]);
    ac.abort();
    await loop;
  });
});

describe('systemClock', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('now() is the wall clock', () => {
    const before = Date.now();
    const now = systemClock.now().getTime();
    expect(now).toBeGreaterThanOrEqual(before);
    expect(now).toBeLessThanOrEqual(Date.now());
  });

  it('sleep resolves after the delay and rejects on abort', async () => {
    await systemClock.sleep(5);
    const ac = new AbortController();
    const p = systemClock.sleep(60_000, ac.signal);
    ac.abort(new Error('shutdown'));
    await expect(p).rejects.toThrow('shutdown');
  });

  it('clearTimeout cancels', async () => {
    const fn = vi.fn();
    systemClock.clearTimeout(systemClock.setTimeout(fn, 1));
    await systemClock.sleep(10);
    expect(fn).not.toHaveBeenCalled();
  });

  it('waits the full delay beyond Node’s 24.8-day timer limit (monthly cron ticks)', () => {
    vi.useFakeTimers();
    const fn = vi.fn();
    const day = 86_400_000;
    const h = systemClock.setTimeout(fn, 31 * day);
    vi.advanceTimersByTime(25 * day);
    expect(fn).not.toHaveBeenCalled();
    vi.advanceTimersByTime(6 * day - 1);
    expect(fn).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(fn).toHaveBeenCalledOnce();

    const cancelled = vi.fn();
    const h2 = systemClock.setTimeout(cancelled, 40 * day);
    vi.advanceTimersByTime(30 * day);
    systemClock.clearTimeout(h2);
    vi.advanceTimersByTime(20 * day);
    expect(cancelled).not.toHaveBeenCalled();
    systemClock.clearTimeout(h);
  });
});
