/**
 * What the workload writes and the checker reads: one JSON line per operation, in the order the workload
 * issued them (it issues one at a time). `ok` lines carry the revision etcd answered with; `unknown` lines
 * are operations whose answer never came (etcd killed, leader lost): they may or may not have been applied.
 */
import { readFileSync } from 'node:fs';

/**
 * A key set to a value, a key deleted (`v: null`), or every key under a prefix deleted. `maybe`: the effect
 * may or may not have happened although the operation was answered (a lease revoke deletes a key only if an
 * unanswered write did not detach it from the lease first).
 */
export type Effect = { k: string; v: string | null; maybe?: true } | { p: string };

export type OpKind = 'put-new' | 'overwrite' | 'delete' | 'range-delete' | 'txn' | 'lease-put' | 'lease-revoke';

export interface AckRecord {
  seq: number;
  op: OpKind;
  effects: Effect[];
  outcome: 'ok' | 'unknown';
  /** The revision of etcd's answer (outcome ok). */
  rev?: number;
}

export function readAckLog(path: string): AckRecord[] {
  const text = readFileSync(path, 'utf8');
  const out: AckRecord[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    out.push(JSON.parse(line) as AckRecord);
  }
  return out;
}
