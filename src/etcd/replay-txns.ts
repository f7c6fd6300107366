/**
 * How a restore's online replay writes revisions into the replay etcd it started: one unconditional
 * transaction per source revision, strictly one after another (etcd gives each the next revision, and
 * concurrent calls would be applied in any order). The transactions go through the lean gRPC client
 * (h2-unary-client.ts), whose round trip costs about half of etcd3's; the etcd3 client stays beside it
 * for everything else and takes over when the lean path fails, so an error etcd returns reaches the
 * operator with etcd's own message (the lean client does not decode gRPC statuses).
 */
import type { Etcd3 } from 'etcd3';
import type { Logger } from '@etcdbrctl/snapstore';
import { asError, EtcdbrError } from '../errors.js';
import { H2CallError, H2DeadlineError, H2UnaryClient } from './h2-unary-client.js';
import { currentRevision } from './ops.js';
import { decodeTxnResponse, encodeTxnRequest, type ReplayOp } from './txn-wire.js';

export type { ReplayOp } from './txn-wire.js';

const TXN_PATH = '/etcdserverpb.KV/Txn';
/** How long one replay call (a transaction, a revision read, the connect) may wait for the replay etcd. */
export const REPLAY_CALL_TIMEOUT_MS = 30_000;

export interface ReplayTxnsOptions {
  /** false: every transaction through the etcd3 client. */
  lean?: boolean;
  /** Ends the pending call and every later one with its reason (the restore's stop signal). */
  signal?: AbortSignal | undefined;
  /** The deadline of each call (default REPLAY_CALL_TIMEOUT_MS): a stalled etcd fails the replay, never hangs it. */
  callTimeoutMs?: number | undefined;
}

interface RawKv {
  txn(
    req: { compare: unknown[]; success: readonly ReplayOp[]; failure: unknown[] },
    options?: { deadline: Date },
  ): Promise<{ header: { revision: string } }>;
}

/** etcd3's KV RPC client; its public API has no raw multi-op transaction with our own op list. */
function rawKv(client: Etcd3): RawKv {
  return (client as unknown as { kv: RawKv }).kv;
}

export interface ReplayTxns {
  /**
   * Commits one revision's operations as one transaction and resolves with the revision etcd gave it
   * (`expectedRevision` when the replay is in step). Calls must not overlap.
   */
  commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number>;
  /** Which client the transactions go through now. */
  readonly path: 'lean' | 'etcd3';
  close(): Promise<void>;
}

/**
 * Opens the replay's transaction path to the local etcd at `clientUrl` (plain http). `client` is an etcd3
 * client of the same etcd; without a lean connection (or with `lean: false`) every transaction uses it.
 */
export async function openReplayTxns(clientUrl: string, client: Etcd3, logger: Logger, opts: ReplayTxnsOptions = {}): Promise<ReplayTxns> {
  let lean: H2UnaryClient | undefined;
  if (opts.lean !== false) {
    try {
      lean = await H2UnaryClient.connect(clientUrl);
    } catch (err) {
      logger.warn({ err: asError(err).message }, 'the lean gRPC connection to the replay etcd failed; replaying through the etcd3 client');
    }
  }
  return new Txns(lean, client, logger, opts.signal, opts.callTimeoutMs ?? REPLAY_CALL_TIMEOUT_MS);
}

/**
 * `work` bounded by `signal` and a deadline, for etcd3 calls that take neither: the call itself may go on in
 * the background, but the replay stops waiting for it (and stops the etcd it talks to). Give the call's own
 * gRPC deadline more time than `timeoutMs` (twice): this bound is the one that reports, in the replay's words.
 */
export async function bounded<T>(work: Promise<T>, what: string, signal: AbortSignal | undefined, timeoutMs: number): Promise<T> {
  signal?.throwIfAborted();
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new EtcdbrError(
            'E_UNAVAILABLE',
            `the replay etcd did not answer (${what}) within ${timeoutMs} ms (stalled or overloaded): stopping the restore`,
          ),
        ),
      timeoutMs,
    );
    onAbort = () => reject(asError(signal?.reason));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  work.catch(() => undefined);
  try {
    return await Promise.race([work, stop]);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}

class Txns implements ReplayTxns {
  constructor(
    private lean: H2UnaryClient | undefined,
    private readonly client: Etcd3,
    private readonly logger: Logger,
    private readonly signal: AbortSignal | undefined,
    private readonly timeoutMs: number,
  ) {}

  get path(): 'lean' | 'etcd3' {
    return this.lean ? 'lean' : 'etcd3';
  }

  async commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number> {
    if (!this.lean) return this.commitEtcd3(ops);
    let response: Buffer;
    try {
      response = await this.lean.call(TXN_PATH, encodeTxnRequest(ops), { signal: this.signal, timeoutMs: this.timeoutMs });
    } catch (err) {
      if (err instanceof H2DeadlineError) {
        throw new EtcdbrError(
          'E_UNAVAILABLE',
          `the replay etcd did not commit revision ${expectedRevision} within ${this.timeoutMs} ms (stalled or overloaded): stopping the restore`,
          { cause: err },
        );
      }
      if (!(err instanceof H2CallError)) throw err;
      return this.takeOver(err, ops, expectedRevision);
    }
    return decodeTxnResponse(response).revision;
  }

  /**
   * The lean call failed: etcd refused the transaction (its reason not decoded), or the connection broke
   * with the transaction applied or not. etcd's revision tells which; a transaction not applied is sent
   * again through etcd3, which then fails with etcd's own message if etcd refuses it again.
   */
  private async takeOver(err: H2CallError, ops: readonly ReplayOp[], expectedRevision: number): Promise<number> {
    this.logger.warn(
      { err, revision: expectedRevision },
      'a replay transaction failed on the lean gRPC path; going on through the etcd3 client',
    );
    const lean = this.lean;
    this.lean = undefined;
    await lean?.close().catch(() => undefined);
    const now = await bounded(currentRevision(this.client, 2 * this.timeoutMs), 'reading the revision', this.signal, this.timeoutMs);
    if (now === expectedRevision) return now;
    if (now === expectedRevision - 1) return this.commitEtcd3(ops);
    // Out of step either way: the caller reports the revision etcd is at against the one expected.
    return now;
  }

  private async commitEtcd3(ops: readonly ReplayOp[]): Promise<number> {
    const res = await bounded(
      rawKv(this.client).txn({ compare: [], success: ops, failure: [] }, { deadline: new Date(Date.now() + 2 * this.timeoutMs) }),
      'a replay transaction',
      this.signal,
      this.timeoutMs,
    );
    return Number(res.header.revision);
  }

  async close(): Promise<void> {
    const lean = this.lean;
    this.lean = undefined;
    await lean?.close();
  }
}
