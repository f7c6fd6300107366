import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { REPEAT_SIGNAL_WINDOW_MS, StopSignals } from '../../src/cli/signals.js';

describe('StopSignals', () => {
  it('first signal shuts down, a repeat within the window is the same request, a later one forces', () => {
    const clock = new FakeClock('2026-11-25T00:00:00Z');
    const stops = new StopSignals();
    expect(stops.receive(clock.now().getTime())).toBe('shutdown');
    expect(stops.receive(clock.now().getTime())).toBe('repeat');
    clock.advance(REPEAT_SIGNAL_WINDOW_MS - 1);
    expect(stops.receive(clock.now().getTime())).toBe('repeat');
    clock.advance(1);
    expect(stops.receive(clock.now().getTime())).toBe('force');
  });

  it('the window counts from the first signal, not the last repeat', () => {
    const stops = new StopSignals(1000);
    expect(stops.receive(0)).toBe('shutdown');
    expect(stops.receive(900)).toBe('repeat');
    expect(stops.receive(1000)).toBe('force');
  });
});
