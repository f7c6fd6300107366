/** `etcdbrctl verify`'s report as a person reads it: counts, sizes and problems said once. */
import { describe, expect, it } from 'vitest';
import { formatReport } from '../../src/cli/commands/verify.js';
import type { VerifyReport } from '../../src/verifier/verify.js';

const full = 'Full-00000000-00000385-1764000000.gz.age';
const delta = 'Incr-00000386-00000386-1764000060.gz';

describe('verify report', () => {
  it('counts one event in the singular and several in the plural', () => {
    const report: VerifyReport = {
      restorable: true,
      chains: [
        {
          base: full,
          ok: true,
          restorableRevision: 387,
          objects: [
            { snapName: delta, kind: 'Incr', ok: true, bytes: 2048, revision: 386, events: 1 },
            { snapName: 'Incr-00000387-00000387-1764000120.gz', kind: 'Incr', ok: true, bytes: 2048, revision: 387, events: 2 },
          ],
        },
      ],
      orphanDeltas: [],
      bytes: 4096,
      durationMs: 10,
    };
    const text = formatReport(report);
    expect(text).toContain(`${delta}  2.0 KiB  1 event up to revision 386\n`);
    expect(text).toContain('2 events up to revision 387\n');
  });

  it('names an object it could not open once and does not call its size 0.0 KiB', () => {
    const problem = `${full} is encrypted and no identity was given to check it`;
    const report: VerifyReport = {
      restorable: false,
      chains: [
        {
          base: full,
          ok: false,
          restorableRevision: 0,
          problem,
          objects: [{ snapName: full, kind: 'Full', ok: false, bytes: 0, problem }],
        },
      ],
      firstBroken: { snapName: full, problem },
      orphanDeltas: [],
      bytes: 0,
      durationMs: 10,
    };
    const text = formatReport(report);
    expect(text).not.toContain('0.0 KiB');
    expect(text).toContain(`  BROKEN ${full}  unread  it is encrypted and no identity was given to check it\n`);
    expect(text).toContain(`NOT restorable as stored: ${problem}\n`);
    for (const line of text.split('\n')) expect(line.split(full).length - 1).toBeLessThanOrEqual(1);
  });
});
