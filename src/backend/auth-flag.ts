/**
 * etcd's auth flag in a backend file, read and set without etcd: the value of key `authEnabled` in bucket
 * `auth` (etcd's `authEnabled` = [1], `authDisabled` = [0]), overwritten in place by the generic one-byte
 * patch (src/bbolt/patch.ts, which says why that is safe for bbolt).
 *
 * Why the restorer needs it: etcd reads the flag once at start (auth store construction) and keeps it in
 * memory (etcd's NewAuthStore; etcd-io/etcd#7260), so a local etcd started on a db with the byte at 0
 * runs without auth, and one started after the byte is back at 1 enforces auth again.
 *
 * Only for data dirs fresh from `snapshot restore`: their WAL holds no auth entry. A data dir that ran
 * `auth enable` itself may have that entry above the backend's consistent index, and etcd re-applies it
 * at start, over the flag.
 */
import { locateFlag, setFlag, type FlagKey } from '../bbolt/patch.js';
import { AUTH_BUCKET, AUTH_ENABLED_KEY } from './schema.js';

const AUTH_FLAG: FlagKey = { bucket: AUTH_BUCKET, key: AUTH_ENABLED_KEY };

/** Where the flag's byte lives, as found from the current meta. */
export interface AuthFlagLocation {
  /** Byte offset of the one-byte value in the file. */
  fileOffset: number;
  /** The value there: true for [1], false for [0]. */
  enabled: boolean;
  /** The page that holds the byte (for an inline `auth` bucket: the page holding the bucket). */
  pageId: number;
  inlineBucket: boolean;
}

/** Finds etcd's auth flag in `dbPath` from the current meta; undefined when auth was never set up. */
export async function locateAuthFlag(dbPath: string): Promise<AuthFlagLocation | undefined> {
  const loc = await locateFlag(dbPath, AUTH_FLAG);
  return loc && { fileOffset: loc.fileOffset, enabled: loc.set, pageId: loc.pageId, inlineBucket: loc.inlineBucket };
}

/** The flag as etcd would read it at start: false when the bucket or key is absent. */
export async function readAuthEnabled(dbPath: string): Promise<boolean> {
  return (await locateAuthFlag(dbPath))?.enabled ?? false;
}

/**
 * Sets etcd's auth flag in a stopped etcd's backend file by overwriting its one byte in place, then reads it
 * back. Returns the previous value; does nothing when the flag already has the wanted value. Absent flag and
 * `enabled = false`: nothing to do. Absent flag and `enabled = true`: refused (BoltPatchError; etcd would also
 * need a root user, which is not ours to create).
 */
export function setAuthEnabled(dbPath: string, enabled: boolean): Promise<{ previous: boolean; changed: boolean }> {
  return setFlag(dbPath, AUTH_FLAG, enabled);
}
