import { describe, expect, it } from 'vitest';
import { DEFAULT_FETCH_STALL_MS } from '@etcdbrctl/snapstore';
import { REPLAY_CALL_TIMEOUT_ENV, STORE_STALL_TIMEOUT_ENV, replayCallTimeout, storeStallTimeout } from '../../src/cli/deadlines.js';
import { REPLAY_CALL_TIMEOUT_MS } from '../../src/restorer/replay-txns.js';

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

describe('storeStallTimeout', () => {
  it('defaults to 1m; ETCDBRCTL_STORE_STALL_TIMEOUT takes a positive Go duration', () => {
    expect(DEFAULT_FETCH_STALL_MS).toBe(60_000);
    expect(storeStallTimeout({})).toEqual({ ms: 60_000 });
    expect(storeStallTimeout({ [STORE_STALL_TIMEOUT_ENV]: '' })).toEqual({ ms: 60_000 });
    expect(storeStallTimeout({ [STORE_STALL_TIMEOUT_ENV]: '1500ms' })).toEqual({ ms: 1500 });
  });

  it('an unusable value keeps the default and says which variable and value', () => {
    const t = storeStallTimeout({ [STORE_STALL_TIMEOUT_ENV]: '0s' });
    expect(t).toEqual({ ms: 60_000, problem: `${STORE_STALL_TIMEOUT_ENV}="0s" is not a positive duration such as 30s: using 1m0s` });
  });
});
