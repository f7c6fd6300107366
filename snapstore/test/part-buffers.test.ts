import { describe, expect, it } from 'vitest';
import { IdleBuffers, PartBufferPool } from '../src/providers/part-buffers.js';

describe('IdleBuffers', () => {
  it('keeps at most its capacity (freeing the rest) and hands out only buffers of the asked size', () => {
    const idle = new IdleBuffers(2);
    idle.enter();
    const [a, b, c] = [Buffer.allocUnsafeSlow(16), Buffer.allocUnsafeSlow(16), Buffer.allocUnsafeSlow(16)];
    idle.keep(a);
    idle.keep(b);
    idle.keep(c);
    expect(idle.size).toBe(2);
    expect(c.length).toBe(0); // beyond the capacity: freed at once
    expect(idle.take(32)).toBeUndefined();
    expect([idle.take(16), idle.take(16)]).toEqual(expect.arrayContaining([a, b]));
    expect(idle.take(16)).toBeUndefined();
  });

  it('lends the buffers of an upload that ended to one that overlapped it, and frees them when the last one ends', () => {
    const idle = new IdleBuffers(4);
    const full = new PartBufferPool(16, 2, idle);
    const delta = new PartBufferPool(16, 2, idle);
    const [first, second] = [full.take(), full.take()];
    first.fill(1);
    full.give(first);
    full.give(second);
    full.release();
    expect(idle.size).toBe(2);
    const lent = delta.take();
    expect([first, second]).toContain(lent);
    expect(delta.allocated).toBe(1);
    delta.give(lent);
    delta.release();
    // No upload runs: nothing is kept, and the memory went back at once (the buffers are detached, empty).
    expect(idle.size).toBe(0);
    expect([first.length, second.length]).toEqual([0, 0]);
    // A later upload maps fresh buffers.
    const later = new PartBufferPool(16, 2, idle);
    expect(later.take().length).toBe(16);
  });

  it('frees what it keeps when the last running upload is abandoned (requests still in flight)', () => {
    const idle = new IdleBuffers(4);
    const done = new PartBufferPool(16, 2, idle);
    const stuck = new PartBufferPool(16, 2, idle);
    const inFlight = stuck.take();
    const kept = done.take();
    done.give(kept);
    done.release();
    done.release(); // a second release changes nothing
    expect(idle.size).toBe(1);
    stuck.abandon();
    expect(idle.size).toBe(0);
    expect(kept.length).toBe(0);
    expect(inFlight.length).toBe(16); // a request may still read it: left to the garbage collector
  });
});

describe('PartBufferPool', () => {
  it('allocates lazily up to its capacity and hands the same buffers out again', () => {
    const pool = new PartBufferPool(16, 2);
    expect(pool.allocated).toBe(0);
    const a = pool.take();
    const b = pool.take();
    expect(pool.allocated).toBe(2);
    expect(() => pool.take()).toThrow(/exhausted/);
    pool.give(a);
    expect(pool.take()).toBe(a);
    pool.give(b);
    expect(pool.take()).toBe(b);
    expect(pool.allocated).toBe(2);
  });

  it('frees its buffers on release when the store keeps none between uploads', () => {
    const pool = new PartBufferPool(16, 2);
    const a = pool.take();
    pool.give(a);
    pool.release();
    expect(a.length).toBe(0);
  });

  it('takes a buffer given back twice only once', () => {
    const pool = new PartBufferPool(16, 2);
    const a = pool.take();
    pool.give(a);
    pool.give(a);
    expect(pool.take()).toBe(a);
    expect(pool.take()).not.toBe(a);
  });
});
