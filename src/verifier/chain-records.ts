/**
 * The `key` bucket entries a fetched chain (local-chain.ts) stands for, in revision order, handed to a visitor
 * one at a time: the base database's entries as they are stored (exact bytes), then the deltas' events above
 * the base's revision as etcd wrote them (kv-record.ts), each op of a revision numbered as its sub revision
 * (a transaction a snapshotter cut across two deltas goes on in the next one, as in the restore). Reading
 * stops after revision `upTo`. Revisions must follow each other without a gap, as etcd numbers them.
 */
import { createReadStream } from 'node:fs';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DELTA_READ_BYTES, DeltaPayloadDecoder } from '../backup/delta-parse.js';
import { Cursor } from '../bbolt/cursor.js';
import { BoltDB } from '../bbolt/db.js';
import { CodedError } from '../errors.js';
import { KEY_BUCKET } from '../backend/schema.js';
import { emptyRecord, recordOfEntry, recordOfEvent, type KvRecord } from './kv-record.js';
import type { LocalChain } from './local-chain.js';

export class ChainRevisionGapError extends CodedError {
  readonly code = 'E_CHAIN_REVISION_GAP';
  override readonly name = 'ChainRevisionGapError';
}

/** Told each entry; the record is reused for the next one (keep nothing of it). */
export type RecordVisitor = (r: KvRecord) => void;

export async function readChainRecords(chain: LocalChain, upTo: number, visit: RecordVisitor, signal?: AbortSignal): Promise<void> {
  const record = emptyRecord();
  await readBase(chain, upTo, visit, record, signal);
  let revision = chain.baseRevision;
  /** The revision whose ops are being read (a cut transaction goes on in the next delta) and its next sub. */
  let open = 0;
  let sub = 0;
  for (const { snap, file, skipEvents } of chain.deltas) {
    if (revision >= upTo && open !== upTo) return;
    signal?.throwIfAborted();
    const what = `delta snapshot ${snap.snapName}`;
    let past = false;
    const take = (ev: DeltaEvent): void => {
      const main = ev.modRevision;
      if (past || (main <= revision && main !== open)) return;
      if (main > upTo) {
        past = true;
        return;
      }
      if (main !== open) {
        if (main !== revision + 1) {
          throw new ChainRevisionGapError(`${what}: the next event after revision ${revision} is at revision ${main}`);
        }
        open = revision = main;
        sub = 0;
      }
      visit(recordOfEvent(ev, sub++, record));
    };
    // The fetch checked the sha256; times are not etcd's.
    const decoder = new DeltaPayloadDecoder(what, { hashChecked: true, times: false, skipEvents: skipEvents ?? 0 });
    const input = createReadStream(file, { highWaterMark: DELTA_READ_BYTES });
    try {
      for await (const chunk of input as AsyncIterable<Buffer>) {
        signal?.throwIfAborted();
        decoder.write(chunk, take);
        if (past) return;
      }
      decoder.end();
    } finally {
      input.destroy();
    }
  }
}

/** Entries handled between two checks of the signal. */
const SIGNAL_EVERY = 4096;

async function readBase(chain: LocalChain, upTo: number, visit: RecordVisitor, record: KvRecord, signal?: AbortSignal): Promise<void> {
  const db = await BoltDB.open(chain.baseFile);
  try {
    const bucket = await db.bucket(KEY_BUCKET);
    if (!bucket) return;
    const where = `full snapshot ${chain.base.snapName}`;
    let n = 0;
    for await (const e of new Cursor(db, bucket)) {
      if (++n % SIGNAL_EVERY === 0) signal?.throwIfAborted();
      recordOfEntry(e.key, e.value, record, where);
      if (record.main > upTo) return;
      visit(record);
    }
  } finally {
    await db.close();
  }
}
