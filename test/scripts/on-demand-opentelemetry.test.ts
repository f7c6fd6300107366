/**
 * scripts/on-demand/opentelemetry-api.cjs stands in for @opentelemetry/api in the bundled CLI: prom-client
 * requires the API when it loads but uses it only for exemplars, so the real package loads on the first read
 * and is then the one every read sees. Run in a child process: the check is what that process's require
 * cache holds before and after.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SHIM = fileURLToPath(new URL('../../scripts/on-demand/opentelemetry-api.cjs', import.meta.url));

const PROBE = `
const loaded = () => Object.keys(require.cache).filter((p) => p.includes('/node_modules/@opentelemetry/api/')).length;
const api = require(process.argv[1]);
const before = loaded();
const trace = api.trace;
const real = require('@opentelemetry/api');
console.log(JSON.stringify({
  before,
  after: loaded(),
  sameTrace: trace === real.trace,
  sameContext: api.context === real.context,
  hasTrace: 'trace' in api,
  hasNothing: 'no-such-export' in api,
  span: typeof api.trace.getSpan(api.context.active()),
}));
`;

describe('@opentelemetry/api on demand', () => {
  it('loads nothing until read, then forwards every read to the real package', () => {
    const out = execFileSync(process.execPath, ['-e', PROBE, SHIM], {
      encoding: 'utf8',
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
    });
    expect(JSON.parse(out)).toEqual({
      before: 0,
      after: expect.any(Number),
      sameTrace: true,
      sameContext: true,
      hasTrace: true,
      hasNothing: false,
      span: 'undefined',
    });
    expect(JSON.parse(out).after).toBeGreaterThan(10);
  });
});
