/**
 * What a stop signal means for the process. Ctrl-C under `npm start` arrives twice within milliseconds (the
 * terminal signals the whole process group, and npm forwards its own), so a second signal right after the
 * first is the same request, not an operator insisting. Only a signal after the grace window forces an
 * immediate exit, which skips what the orderly shutdown still had to do (the last delta snapshot).
 */
import { formatGoDuration, parseGoDuration } from '../config/values.js';

export type SignalAction = 'shutdown' | 'repeat' | 'force';

/** A second signal this soon after the first is taken as the same request. */
export const REPEAT_SIGNAL_WINDOW_MS = 2_000;

/**
 * Ours, for tests and operators who want the old behaviour (`0s`: any second signal forces): the grace window
 * as a Go duration.
 */
export const STOP_SIGNAL_WINDOW_ENV = 'ETCDBRCTL_STOP_SIGNAL_WINDOW';

export class StopSignals {
  private firstAt: number | undefined;

  constructor(readonly windowMs = REPEAT_SIGNAL_WINDOW_MS) {}

  /** Decides what a signal received at `nowMs` asks for. The window counts from the first signal. */
  receive(nowMs: number): SignalAction {
    if (this.firstAt === undefined) {
      this.firstAt = nowMs;
      return 'shutdown';
    }
    return nowMs - this.firstAt < this.windowMs ? 'repeat' : 'force';
  }
}

/** The grace window from the environment; an unusable value keeps the default and says why. */
export function stopSignalWindow(env: Readonly<Record<string, string | undefined>>): { ms: number; problem?: string } {
  const raw = env[STOP_SIGNAL_WINDOW_ENV];
  if (raw === undefined || raw === '') return { ms: REPEAT_SIGNAL_WINDOW_MS };
  let ms: number;
  try {
    ms = parseGoDuration(raw);
  } catch {
    ms = -1;
  }
  if (ms >= 0) return { ms };
  return {
    ms: REPEAT_SIGNAL_WINDOW_MS,
    problem: `${STOP_SIGNAL_WINDOW_ENV}=${JSON.stringify(raw)} is not a duration such as 2s or 0s: using ${formatGoDuration(REPEAT_SIGNAL_WINDOW_MS)}`,
  };
}

/** The log line for a signal, so that an operator sees what their Ctrl-C did. */
export function signalLogLine(action: SignalAction, signal: string, windowMs: number): { level: 'info' | 'warn'; msg: string } {
  const window = formatGoDuration(windowMs);
  switch (action) {
    case 'shutdown':
      return {
        level: 'info',
        msg: `received ${signal}: shutting down in order; the same signal within ${window} is the same request, a later one forces an immediate exit`,
      };
    case 'repeat':
      return { level: 'info', msg: `received ${signal} again within ${window}: the same stop request, the orderly shutdown goes on` };
    case 'force':
      return {
        level: 'warn',
        msg: `received ${signal} again during the shutdown: forcing the exit now, without finishing the shutdown (no last delta snapshot)`,
      };
  }
}
