/**
 * File names in an etcd data dir: WAL segments `member/wal/%016x-%016x.wal` (sequence, index of the first
 * entry the segment may hold) and raft snapshots `member/snap/%016x-%016x.snap` (term, index).
 */
import { readdir } from 'node:fs/promises';

export interface WalName {
  name: string;
  seq: number;
  index: number;
}

// Go parses with Sscanf("%016x-%016x.wal"), which also takes upper-case and shorter hex numbers.
const WAL_RE = /^([0-9a-fA-F]{1,16})-([0-9a-fA-F]{1,16})\.wal$/;
const SNAP_RE = /^([0-9a-fA-F]{1,16})-([0-9a-fA-F]{1,16})\.snap$/;

export function parseWalName(name: string): WalName | undefined {
  const m = WAL_RE.exec(name);
  if (!m) return undefined;
  return { name, seq: Number.parseInt(m[1]!, 16), index: Number.parseInt(m[2]!, 16) };
}

export function walName(seq: number, index: number): string {
  return `${seq.toString(16).padStart(16, '0')}-${index.toString(16).padStart(16, '0')}.wal`;
}

export interface SnapName {
  name: string;
  term: number;
  index: number;
}

export function parseSnapName(name: string): SnapName | undefined {
  const m = SNAP_RE.exec(name);
  if (!m) return undefined;
  return { name, term: Number.parseInt(m[1]!, 16), index: Number.parseInt(m[2]!, 16) };
}

export function snapName(term: number, index: number): string {
  return `${term.toString(16).padStart(16, '0')}-${index.toString(16).padStart(16, '0')}.snap`;
}

/** The WAL segment names of `walDir`, sorted as etcd sorts them (by name); other files are ignored. */
export async function listWalNames(walDir: string): Promise<WalName[]> {
  const names = await readdir(walDir);
  return names
    .sort()
    .map(parseWalName)
    .filter((n): n is WalName => n !== undefined);
}
