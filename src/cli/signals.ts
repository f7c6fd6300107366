/**
 * What a stop signal means for the process. Ctrl-C under `npm start` arrives twice within milliseconds (the
 * terminal signals the whole process group, and npm forwards its own), so a second signal right after the
 * first is the same request, not an operator insisting. Only a signal after the grace window forces an
 * immediate exit, which skips the last delta snapshot.
 */
export type SignalAction = 'shutdown' | 'repeat' | 'force';

/** A second signal this soon after the first is taken as the same request. */
export const REPEAT_SIGNAL_WINDOW_MS = 2_000;

export class StopSignals {
  private firstAt: number | undefined;

  constructor(private readonly windowMs = REPEAT_SIGNAL_WINDOW_MS) {}

  /** Decides what a signal received at `nowMs` asks for. */
  receive(nowMs: number): SignalAction {
    if (this.firstAt === undefined) {
      this.firstAt = nowMs;
      return 'shutdown';
    }
    return nowMs - this.firstAt < this.windowMs ? 'repeat' : 'force';
  }
}
