import { describe, expect, it } from 'vitest';
import { EtcdError } from '../../src/etcd/errors.js';
import { EtcdbrError } from '../../src/errors.js';
import { MaintenanceBusyError } from '../../src/cluster/defrag.js';
import { httpStatusOf } from '../../src/server/error-status.js';
import { ValueError } from '../../src/config/values.js';

describe('httpStatusOf', () => {
  it('tells the caller’s mistakes (4xx) from ours and our dependencies’ (5xx) by the error’s code', () => {
    expect(httpStatusOf(new EtcdbrError('E_INVALID_INPUT', 'x'))).toBe(400);
    expect(httpStatusOf(new ValueError('x'))).toBe(400);
    expect(httpStatusOf(new EtcdbrError('E_CONFLICT', 'x'))).toBe(409);
    expect(httpStatusOf(new MaintenanceBusyError('x'))).toBe(409);
    expect(httpStatusOf(new EtcdError('E_ETCD_UNAVAILABLE', 'x'))).toBe(503);
    expect(httpStatusOf(new EtcdbrError('E_STOPPED', 'x'))).toBe(503);
  });

  it('falls back for bugs, uncoded errors and codes without a status', () => {
    expect(httpStatusOf(new EtcdbrError('E_INTERNAL', 'x'))).toBe(500);
    expect(httpStatusOf(new EtcdbrError('E_CORRUPT', 'x'), 502)).toBe(502);
    expect(httpStatusOf(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBe(500);
    expect(httpStatusOf('a string')).toBe(500);
  });
});
