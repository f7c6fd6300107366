/**
 * Which backups a scrub reads: the newest restorable chain (what a restore would use now), or every chain
 * in the store. A chain is a full snapshot and the deltas after it up to the next full. Gaps between the
 * deltas' names are found here, before anything is downloaded.
 */
import { sortSnapshots, type Snapshot } from '@etcdbrctl/snapstore';

export interface Chain {
  base: Snapshot;
  /** The deltas after the base, in revision order; deltas entirely inside what comes before are left out. */
  deltas: Snapshot[];
  /** A gap in the names: the first delta that does not continue the chain (nothing after it is restorable). */
  gap?: { snapshot: Snapshot; expectedStart: number };
}

export interface VerificationPlan {
  chains: Chain[];
  /** Deltas older than every full snapshot: no restore can use them (reported, not read). */
  orphanDeltas: Snapshot[];
}

export function planVerification(listing: readonly Snapshot[], opts: { all: boolean }): VerificationPlan {
  const sorted = sortSnapshots(listing.filter((s) => !s.isChunk));
  const chains: Chain[] = [];
  const orphanDeltas: Snapshot[] = [];
  let current: Chain | undefined;
  let covered = 0;
  for (const s of sorted) {
    if (s.kind === 'Full') {
      current = { base: s, deltas: [] };
      chains.push(current);
      covered = s.lastRevision;
      continue;
    }
    if (!current) {
      orphanDeltas.push(s);
      continue;
    }
    if (current.gap) continue;
    if (s.lastRevision <= covered) continue;
    if (s.startRevision > covered + 1) {
      current.gap = { snapshot: s, expectedStart: covered + 1 };
      continue;
    }
    current.deltas.push(s);
    covered = s.lastRevision;
  }
  return { chains: opts.all ? chains : chains.slice(-1), orphanDeltas };
}
