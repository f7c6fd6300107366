import { describe, expect, it } from 'vitest';
import { IdleBuffers, PartBufferPool } from '../src/providers/part-buffers.js';

describe('IdleBuffers', () => {
  it('keeps at most its capacity and hands out only buffers of the asked size', () => {
    const idle = new IdleBuffers(2);
    const [a, b, c] = [Buffer.alloc(16), Buffer.alloc(16), Buffer.alloc(16)];
    idle.keep(a);
    idle.keep(b);
    idle.keep(c);
    expect(idle.size).toBe(2);
    expect(idle.take(32)).toBeUndefined();
    expect([idle.take(16), idle.take(16)]).toEqual(expect.arrayContaining([a, b]));
    expect(idle.take(16)).toBeUndefined();
  });

  it('is where a part pool takes from first and gives back to on release', () => {
    const idle = new IdleBuffers(4);
    const kept = Buffer.alloc(16);
    idle.keep(kept);
    const pool = new PartBufferPool(16, 2, idle);
    const first = pool.take();
    const second = pool.take();
    expect(first).toBe(kept);
    expect(second).not.toBe(kept);
    expect(pool.allocated).toBe(2);
    pool.give(first);
    pool.give(second);
    expect(idle.size).toBe(0);
    pool.release();
    expect(idle.size).toBe(2);
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

  it('takes a buffer given back twice only once', () => {
    const pool = new PartBufferPool(16, 2);
    const a = pool.take();
    pool.give(a);
    pool.give(a);
    expect(pool.take()).toBe(a);
    expect(pool.take()).not.toBe(a);
  });
});
