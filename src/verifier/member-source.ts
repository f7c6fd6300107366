/**
 * An etcd member as the hash drill compares with it: its HashKV and its current revision, asked of that member
 * alone (HashKV is answered by the member asked, from its own backend, never forwarded).
 */
import type { EtcdClient, EtcdKvHash } from '../etcd/index.js';

/** One member to compare with: HashKV and its current revision, of that member alone. */
export interface EtcdHashSource {
  /** How the member is named in reports (its endpoint). */
  endpoint: string;
  hashKv(revision: number, signal?: AbortSignal): Promise<EtcdKvHash>;
  /** The member's current revision and the size of its backend file. */
  status(signal?: AbortSignal): Promise<{ revision: number; dbSize: number }>;
}

/** How long one HashKV may take: the member reads its whole backend for it (seconds per GiB). */
const HASH_KV_TIMEOUT_MS = 10 * 60_000;

/** A member as a hash source, through a client of that member alone (HashKV is answered by the member asked). */
export function memberHashSource(endpoint: string, client: EtcdClient, statusTimeoutMs = 30_000): EtcdHashSource {
  return {
    endpoint,
    hashKv: (revision, signal) => client.hashKv(revision, { timeoutMs: HASH_KV_TIMEOUT_MS, ...(signal ? { signal } : {}) }),
    status: async () => {
      const s = await client.status({ timeoutMs: statusTimeoutMs });
      return { revision: s.revision, dbSize: s.dbSize };
    },
  };
}
