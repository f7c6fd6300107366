import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { REPEAT_SIGNAL_WINDOW_MS, signalLogLine, STOP_SIGNAL_WINDOW_ENV, StopSignals, stopSignalWindow } from '../../src/cli/signals.js';

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

describe('stopSignalWindow', () => {
  it('defaults to 2s; ETCDBRCTL_STOP_SIGNAL_WINDOW takes a Go duration, 0s included', () => {
    expect(stopSignalWindow({})).toEqual({ ms: REPEAT_SIGNAL_WINDOW_MS });
    expect(stopSignalWindow({ [STOP_SIGNAL_WINDOW_ENV]: '' })).toEqual({ ms: REPEAT_SIGNAL_WINDOW_MS });
    expect(stopSignalWindow({ [STOP_SIGNAL_WINDOW_ENV]: '500ms' })).toEqual({ ms: 500 });
    expect(stopSignalWindow({ [STOP_SIGNAL_WINDOW_ENV]: '0s' })).toEqual({ ms: 0 });
  });

  it('an unusable value keeps the default and says which variable and value', () => {
    for (const bad of ['2', 'soon', '-1s']) {
      const w = stopSignalWindow({ [STOP_SIGNAL_WINDOW_ENV]: bad });
      expect(w.ms).toBe(REPEAT_SIGNAL_WINDOW_MS);
      expect(w.problem).toContain(`${STOP_SIGNAL_WINDOW_ENV}=${JSON.stringify(bad)}`);
    }
  });

  it('a window of 0 makes every later signal force the exit', () => {
    const stops = new StopSignals(0);
    expect(stops.receive(5)).toBe('shutdown');
    expect(stops.receive(5)).toBe('force');
  });
});

describe('signalLogLine', () => {
  it('says what each signal did, with the window as a Go duration', () => {
    expect(signalLogLine('shutdown', 'SIGINT', 2000)).toEqual({
      level: 'info',
      msg: 'received SIGINT: shutting down in order; the same signal within 2s is the same request, a later one forces an immediate exit',
    });
    expect(signalLogLine('repeat', 'SIGINT', 2000).msg).toBe(
      'received SIGINT again within 2s: the same stop request, the orderly shutdown goes on',
    );
    expect(signalLogLine('force', 'SIGTERM', 2000)).toMatchObject({
      level: 'warn',
      msg: expect.stringContaining('received SIGTERM again during the shutdown: forcing the exit now'),
    });
  });
});
