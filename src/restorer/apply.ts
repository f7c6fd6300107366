import { createReadStream } from 'node:fs';
import type { Etcd3 } from 'etcd3';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DeltaPayloadParser } from '../backup/delta-parse.js';

interface RawRequestOp {
  request_put?: { key: Buffer; value: Buffer };
  request_delete_range?: { key: Buffer };
}
interface RawKv {
  txn(req: { compare: unknown[]; success: RawRequestOp[]; failure: RawRequestOp[] }): Promise<{ header: { revision: string } }>;
}

export class RevisionMismatchError extends Error {
  override readonly name = 'RevisionMismatchError';
}

export interface ApplyResult {
  /** Revisions written (one transaction each). */
  revisions: number;
  events: number;
  /** The store revision after the last transaction (unchanged if nothing was applied). */
  lastRevision: number;
}

/** etcd3's KV RPC client; its public API has no raw multi-op transaction with our own op list. */
export function rawKv(client: Etcd3): RawKv {
  return (client as unknown as { kv: RawKv }).kv;
}

/**
 * Replays one delta (a decompressed payload file) into etcd: one transaction per source revision, in
 * order, only events above `currentRevision`, up to `stopAtRevision`. Each transaction must land exactly
 * on its source revision, so the restored keys get the source's mod/create revisions and versions.
 * Leases are not restored (as upstream): the keys are written without them.
 */
export async function applyDeltaFile(
  client: Etcd3,
  file: string,
  what: string,
  currentRevision: number,
  stopAtRevision = Number.MAX_SAFE_INTEGER,
): Promise<ApplyResult> {
  const kv = rawKv(client);
  const parser = new DeltaPayloadParser(what);
  createReadStream(file, { highWaterMark: 1 << 20 })
    .on('error', (err) => parser.destroy(err))
    .pipe(parser);

  let revision = currentRevision;
  let revisions = 0;
  let events = 0;
  let group: RawRequestOp[] = [];
  let groupRevision = 0;

  const flush = async () => {
    if (group.length === 0) return;
    const res = await kv.txn({ compare: [], success: group, failure: [] });
    const applied = Number(res.header.revision);
    if (applied !== groupRevision) {
      throw new RevisionMismatchError(
        `${what}: mismatched event revision while applying delta snapshot, expected ${groupRevision} but applied ${applied}`,
      );
    }
    revision = applied;
    revisions++;
    events += group.length;
    group = [];
  };

  for await (const ev of parser as AsyncIterable<DeltaEvent>) {
    if (ev.modRevision <= currentRevision) continue;
    if (ev.modRevision > stopAtRevision) {
      parser.destroy();
      break;
    }
    if (ev.modRevision !== groupRevision) {
      await flush();
      if (ev.modRevision !== revision + 1) {
        throw new RevisionMismatchError(
          `${what}: mismatched event revision while applying delta snapshot, expected ${revision + 1} but the next event is at ${ev.modRevision}`,
        );
      }
      groupRevision = ev.modRevision;
    }
    group.push(ev.type === 'PUT' ? { request_put: { key: ev.key, value: ev.value } } : { request_delete_range: { key: ev.key } });
  }
  await flush();
  return { revisions, events, lastRevision: revision };
}
