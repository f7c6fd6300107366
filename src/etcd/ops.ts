import type { Etcd3 } from 'etcd3';

/** etcd3 keeps its KV RPC client private; these are the few raw calls we need. */
interface RawKvClient {
  compact(req: { revision: string; physical: boolean }, options?: { deadline?: Date }): Promise<unknown>;
}

/** Compacts the key space at `revision`; `physical` waits until the compaction is applied to the backend. */
export async function compact(client: Etcd3, revision: number, opts: { physical?: boolean; timeoutMs?: number } = {}): Promise<void> {
  const kv = (client as unknown as { kv: RawKvClient }).kv;
  await kv.compact(
    { revision: String(revision), physical: opts.physical ?? true },
    opts.timeoutMs ? { deadline: new Date(Date.now() + opts.timeoutMs) } : undefined,
  );
}

/** etcd's current revision (the header of a one-key read), within `timeoutMs`. */
export async function currentRevision(client: Etcd3, timeoutMs: number): Promise<number> {
  const res = await client
    .get('foo')
    .options({ deadline: new Date(Date.now() + timeoutMs) })
    .exec();
  return Number(res.header.revision);
}
