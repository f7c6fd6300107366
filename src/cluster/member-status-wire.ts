/**
 * The EtcdMember status on the wire: Kubernetes times and quantities as the API server writes them, and the
 * parts of a status someone else wrote that this member adopts (well-formed entries only). Pure.
 */
import { EtcdbrError } from '../errors.js';
import type { MemberState, MemberSubState, SnapshotsStatus, SnapshotStatus, StateTransition } from './member-status-types.js';

/** A snapshots block read from the EtcdMember, with its accumulatedDeltaSize as bytes. */
export interface PublishedSnapshots {
  snapshots: SnapshotsStatus;
  accumulatedBytes: number;
}

/** A `status.snapshots` someone else may have written, when its lastFull and accumulatedDeltaSize are well-formed. */
export function parseSnapshots(value: unknown): PublishedSnapshots | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as Record<string, unknown>;
  const lastFull = parseSnapshotStatus(v.lastFull);
  const accumulatedBytes = typeof v.accumulatedDeltaSize === 'string' ? parseBinaryQuantity(v.accumulatedDeltaSize) : undefined;
  if (lastFull === undefined || accumulatedBytes === undefined) return undefined;
  const lastDelta = parseSnapshotStatus(v.lastDelta);
  return {
    snapshots: { lastFull, ...(lastDelta ? { lastDelta } : {}), accumulatedDeltaSize: formatQuantity(accumulatedBytes) },
    accumulatedBytes,
  };
}

function parseSnapshotStatus(value: unknown): SnapshotStatus | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.name !== 'string' || typeof v.timestamp !== 'string') return undefined;
  if (!Number.isSafeInteger(v.startRevision) || !Number.isSafeInteger(v.endRevision)) return undefined;
  return {
    timestamp: v.timestamp,
    name: v.name,
    ...(typeof v.size === 'string' ? { size: v.size } : {}),
    startRevision: v.startRevision as number,
    endRevision: v.endRevision as number,
  };
}

/**
 * The byte count of a quantity in the form formatQuantity writes (digits, optionally one binary suffix);
 * undefined for anything else, such as decimal suffixes or fractions, which no sidecar writes here.
 */
export function parseBinaryQuantity(q: string): number | undefined {
  const m = /^(\d+)(Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(q);
  if (!m) return undefined;
  const power = m[2] === undefined ? 0 : BINARY_SUFFIXES.indexOf(m[2] as (typeof BINARY_SUFFIXES)[number]);
  const bytes = Number(m[1]) * 1024 ** power;
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

const STATES: ReadonlySet<string> = new Set(['New', 'Initializing', 'Starting', 'Started']);
const SUB_STATES: ReadonlySet<string> = new Set([
  'New',
  'DBValidationSanity',
  'DBValidationFull',
  'Restoration',
  'PendingLearner',
  'Learner',
  'Follower',
  'Leader',
]);

/** The well-formed entries of a `status.transitions` value someone else may have written; the rest is skipped. */
export function parseTransitions(value: unknown): StateTransition[] {
  if (!Array.isArray(value)) return [];
  const out: StateTransition[] = [];
  for (const v of value) {
    if (typeof v !== 'object' || v === null) continue;
    const t = v as Record<string, unknown>;
    if (typeof t.state !== 'string' || !STATES.has(t.state)) continue;
    if (typeof t.subState !== 'string' || !SUB_STATES.has(t.subState)) continue;
    if (typeof t.reason !== 'string' || typeof t.transitionTime !== 'string') continue;
    out.push({
      state: t.state as MemberState,
      subState: t.subState as MemberSubState,
      reason: t.reason,
      transitionTime: t.transitionTime,
      message: typeof t.message === 'string' ? t.message : '',
    });
  }
  return out;
}

/** metav1.Time on the wire: RFC 3339 in UTC with whole seconds. */
export function formatKubeTime(d: Date): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

const BINARY_SUFFIXES = ['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'] as const;

/**
 * A byte count as a Kubernetes quantity in the canonical form resource.Quantity prints for binary sizes:
 * the largest power-of-1024 suffix that divides it exactly (`6442450944` → `6Gi`, `3072` → `3Ki`, `1536`
 * stays `1536`).
 */
export function formatQuantity(bytes: number): string {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new EtcdbrError('E_INTERNAL', `byte count ${bytes} is not a non-negative integer`);
  if (bytes < 1024) return String(bytes);
  let n = bytes;
  let i = 0;
  while (n % 1024 === 0 && i < BINARY_SUFFIXES.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n}${BINARY_SUFFIXES[i]}`;
}
