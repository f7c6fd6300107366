import { defineGroup } from '../schema.js';
import type { ExponentialBackoffConfig } from '../types.js';

/** The snapshotter's restart backoff (`pkg/types/exponentialbackoff.go`). */
export const exponentialBackoffGroup = defineGroup<ExponentialBackoffConfig>({
  title: 'exponential backoff',
  fields: {
    multiplier: { type: 'uint', flag: 'backoff-multiplier', usage: 'multiplier of the snapshotter restart backoff' },
    attemptLimit: { type: 'uint', flag: 'backoff-attempt-limit', usage: 'restart attempts after which the backoff stops growing' },
    thresholdTime: { type: 'duration', flag: 'backoff-threshold-time', usage: 'upper bound of the restart backoff' },
  },
  defaults: () => ({ multiplier: 2, attemptLimit: 6, thresholdTime: 128_000 }),
});
