import { describe, expect, it } from 'vitest';
import { REPLAY_CALL_TIMEOUT_ENV, replayCallTimeout } from '../../src/cli/deadlines.js';
import { REPLAY_CALL_TIMEOUT_MS } from '../../src/etcd/replay-txns.js';

describe('replayCallTimeout', () => {
  it('defaults to 30s; ETCDBRCTL_REPLAY_CALL_TIMEOUT takes a positive Go duration', () => {
    expect(REPLAY_CALL_TIMEOUT_MS).toBe(30_000);
    expect(replayCallTimeout({})).toEqual({ ms: REPLAY_CALL_TIMEOUT_MS });
    expect(replayCallTimeout({ [REPLAY_CALL_TIMEOUT_ENV]: '' })).toEqual({ ms: REPLAY_CALL_TIMEOUT_MS });
    expect(replayCallTimeout({ [REPLAY_CALL_TIMEOUT_ENV]: '2m30s' })).toEqual({ ms: 150_000 });
  });

  it('an unusable value keeps the default and says which variable and value', () => {
    for (const bad of ['0s', '30', 'never', '-1s']) {
      const t = replayCallTimeout({ [REPLAY_CALL_TIMEOUT_ENV]: bad });
      expect(t.ms).toBe(REPLAY_CALL_TIMEOUT_MS);
      expect(t.problem).toContain(`${REPLAY_CALL_TIMEOUT_ENV}=${JSON.stringify(bad)} is not a positive duration`);
    }
  });
});
