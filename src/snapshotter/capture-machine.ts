import { step, type CaptureEffect, type CaptureEvent, type CaptureState } from './capture-step.js';

/** One snapshotter's capture state and the pure step that moves it on; shared by the snapshotter and its intake. */
export class CaptureMachine {
  constructor(private current: CaptureState) {}

  get state(): CaptureState {
    return this.current;
  }

  /** Tells the step what happened; returns the effects to carry out, in order. */
  tell(event: CaptureEvent): readonly CaptureEffect[] {
    const next = step(this.current, event);
    this.current = next.state;
    return next.effects;
  }
}
