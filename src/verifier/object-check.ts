/** What the scrub of a full and of a delta snapshot share: the stored size held against the listing. */
import type { Snapshot } from '@etcdbrctl/snapstore';

/** What the store's listing says against what was downloaded; undefined when they agree. */
export function sizeProblem(snap: Snapshot, bytes: number): string | undefined {
  // An encrypted object is counted as decrypted; its length is checked by age's authentication instead.
  if (snap.sizeBytes === undefined || snap.isEncrypted === true || snap.sizeBytes === bytes) return undefined;
  return `the store lists ${snap.sizeBytes} bytes, but ${bytes} bytes were downloaded`;
}
