import { describe, expect, it } from 'vitest';
import { ExponentialBackoff } from '../../src/snapshotter/backoff.js';

const seq = (b: ExponentialBackoff, n: number): number[] => Array.from({ length: n }, () => b.next() / 1000);

describe('ExponentialBackoff (upstream pkg/backoff)', () => {
  it('defaults (multiplier 2, attempt limit 6, threshold 128 s): 7 multiplicative steps, then the threshold', () => {
    const b = new ExponentialBackoff();
    expect(b.active).toBe(false);
    // The 7th value is computed (2^7 = 128) because the limit check (attempt > limit) precedes the increment.
    expect(seq(b, 10)).toEqual([2, 4, 8, 16, 32, 64, 128, 128, 128, 128]);
    expect(b.attempts).toBe(7);
  });

  it("upstream's unit-test setting (limit 3, threshold 6 s): threshold may be below the last wait", () => {
    const b = new ExponentialBackoff({ attemptLimit: 3, multiplier: 2, thresholdMs: 6000 });
    expect(seq(b, 7)).toEqual([2, 4, 8, 16, 6, 6, 6]);
  });

  it.each([
    { opts: { multiplier: 3, attemptLimit: 2, thresholdMs: 30_000 }, want: [3, 9, 27, 30, 30] },
    { opts: { multiplier: 2, attemptLimit: 0, thresholdMs: 10_000 }, want: [2, 10, 10] },
    { opts: { multiplier: 1, attemptLimit: 2, thresholdMs: 5_000 }, want: [1, 1, 1, 5] },
    { opts: { multiplier: 0, attemptLimit: 1, thresholdMs: 5_000 }, want: [0, 0, 5] },
  ])('multiplier $opts.multiplier, limit $opts.attemptLimit', ({ opts, want }) => {
    expect(seq(new ExponentialBackoff(opts), want.length)).toEqual(want);
  });

  it('wraps like an int64 Duration when the limit is huge (negative ⇒ 0, as a Go timer fires at once)', () => {
    const b = new ExponentialBackoff({ multiplier: 2, attemptLimit: 100, thresholdMs: 1000 });
    const values = seq(b, 40);
    expect(values[32]).toBe(2 ** 33); // 8.6e18 ns still fits
    expect(values[33]).toBe(0); // 2^34 s in ns = 2^63.x wraps to negative
  });

  it('reset() restarts the sequence and clears the active flag', () => {
    const b = new ExponentialBackoff();
    b.start();
    expect(b.active).toBe(true);
    seq(b, 9);
    b.reset();
    expect(b.active).toBe(false);
    expect(b.attempts).toBe(0);
    expect(seq(b, 3)).toEqual([2, 4, 8]);
  });

  it('rejects negative or fractional multiplier / attempt limit', () => {
    expect(() => new ExponentialBackoff({ multiplier: -1 })).toThrow(/must be a non-negative integer/);
    expect(() => new ExponentialBackoff({ attemptLimit: 1.5 })).toThrow(/must be a non-negative integer/);
  });
});
