/**
 * The two ways verify reads a delta (whole, for the usual small ones; streamed, above the size limit) on
 * Go-written stores of every compression: the same verdicts, and the same clear problem when an object is
 * corrupt or not what the listing said.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { planVerification } from '../../src/verifier/chains.js';
import { verifyBackups, type VerifyReport } from '../../src/verifier/verify.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { copyUpstreamStore } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';

const cleanups = cleanupAfterEach();

/** A copy of a Go-written fixture store in a temp dir of this test; returns the container path and its v2 folder. */
async function storeCopy(fixture: string): Promise<{ root: string; v2: string }> {
  return copyUpstreamStore(fixture, await cleanups.tempDir('etcdbr-delta-check-'));
}

type Plan = ReturnType<typeof planVerification>;

/** Lists the store once (every chain); `verify` then checks that listing with deltas read whole, or streamed. */
async function listed(root: string): Promise<{ plan: Plan; verify: (smallDeltaBytes: number) => Promise<VerifyReport> }> {
  const temp = await cleanups.tempDir('etcdbr-delta-check-tmp-');
  const store = await openLocalStore(root, temp);
  const plan = planVerification(await store.list(), { all: true });
  return { plan, verify: (smallDeltaBytes) => verifyBackups(store, plan, { maxFetchers: 3, smallDeltaBytes }) };
}

const WHOLE = 1024 * 1024;
const STREAMED = 0;

describe('verify reads a delta whole or streamed, with the same verdict', () => {
  it.each(['gzip', 'zlib', 'lzw', 'none', 'final-gzip', 'two-fulls-gzip'])('%s: every delta checks out both ways', async (fixture) => {
    const { root } = await storeCopy(fixture);
    const { plan, verify } = await listed(root);
    expect(plan.chains[0]!.deltas.length).toBeGreaterThan(0);
    const whole = await verify(WHOLE);
    const streamed = await verify(STREAMED);
    expect(whole.restorable).toBe(true);
    const strip = (r: VerifyReport) => r.chains.map((c) => ({ ...c, objects: c.objects.map((o) => ({ ...o })) }));
    expect(strip(whole)).toEqual(strip(streamed));
    const deltas = whole.chains.flatMap((c) => c.objects).filter((o) => o.kind === 'Incr');
    expect(deltas.length).toBe(4);
    expect(deltas.every((o) => o.ok && o.events! > 0 && o.bytes > 0)).toBe(true);
  });

  it('a truncated gzip delta is named as corrupt, both ways', async () => {
    const { root, v2 } = await storeCopy('gzip');
    const { plan, verify } = await listed(root);
    const victim = plan.chains[0]!.deltas[1]!;
    const file = join(v2, victim.snapName);
    writeFileSync(file, readFileSync(file).subarray(0, 40));
    for (const limit of [WHOLE, STREAMED]) {
      const report = await verify(limit);
      expect(report.restorable).toBe(false);
      expect(report.firstBroken?.snapName).toBe(victim.snapName);
      expect(report.firstBroken?.problem).toMatch(new RegExp(`${victim.snapName}.*(corrupt or truncated gzip|the store lists)`));
    }
  });

  it('a delta that grew past its listed size after the listing is reported with both sizes', async () => {
    const { root, v2 } = await storeCopy('gzip');
    const { plan, verify } = await listed(root);
    const victim = plan.chains[0]!.deltas[0]!;
    const listedBytes = victim.sizeBytes!;
    appendFileSync(join(v2, victim.snapName), Buffer.alloc(4096, 0x41));
    // The listing allows the whole read (limit = its listed size); the object now holds more than that.
    const report = await verify(listedBytes);
    const verdict = report.chains[0]!.objects.find((o) => o.snapName === victim.snapName)!;
    expect(verdict.ok).toBe(false);
    expect(verdict.bytes).toBe(listedBytes + 4096);
    expect(verdict.problem).toBe(`the store lists ${listedBytes} bytes, but ${listedBytes + 4096} bytes were downloaded`);
  });
});
