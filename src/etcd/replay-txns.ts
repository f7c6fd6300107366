/**
 * How a restore's online replay writes revisions into the replay etcd it started: one unconditional
 * transaction per source revision, strictly one after another (etcd gives each the next revision, and
 * concurrent calls would be applied in any order). The transactions go through the lean gRPC client
 * (h2-unary-client.ts): through the full client's node:http2 channel (grpc-channel.ts) each one cost this
 * process 2.5-3x the CPU (~280-320 µs against ~90-120 µs), and the replay on etcd 3.5 without fsync ran at
 * 0.6x the rate (docs/performance.md, "Why the online replay has a client of its own"). The full client stays beside it
 * for everything else and takes over when the lean path fails, so an error etcd returns reaches the
 * operator with etcd's own message (the lean client does not decode gRPC statuses).
 */
import type { Logger } from '@etcdbrctl/snapstore';
import { asError, EtcdbrError } from '../errors.js';
import { H2CallError, H2DeadlineError, H2UnaryClient } from './h2-unary-client.js';
import { decodeTxnResponse, encodeTxnRequest, type ReplayOp } from './txn-wire.js';

export type { ReplayOp } from './txn-wire.js';
export { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';
import { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';

const TXN_PATH = '/etcdserverpb.KV/Txn';

export interface ReplayTxnsOptions {
  /** Ends the pending call and every later one with its reason (the restore's stop signal). */
  signal?: AbortSignal | undefined;
  /** The deadline of each call (default REPLAY_CALL_TIMEOUT_MS): a stalled etcd fails the replay, never hangs it. */
  callTimeoutMs?: number | undefined;
}

/** What the replay needs of the full client of the same etcd, which takes over from the lean path. */
export interface ReplayFallback {
  /** etcd's current revision, within `timeoutMs`. */
  currentRevision(timeoutMs: number): Promise<number>;
  /** One unconditional transaction of `ops`; resolves with the revision etcd gave it. */
  txn(ops: readonly ReplayOp[], timeoutMs: number): Promise<number>;
}

export interface ReplayTxns {
  /**
   * Commits one revision's operations as one transaction and resolves with the revision etcd gave it
   * (`expectedRevision` when the replay is in step). Calls must not overlap.
   */
  commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number>;
  /** Which client the transactions go through now. */
  readonly path: 'lean' | 'client';
  close(): Promise<void>;
}

/**
 * Opens the replay's transaction path to the local etcd at `clientUrl` (plain http). `client` is the full
 * client of the same etcd; without a lean connection every transaction uses it.
 */
export async function openReplayTxns(
  clientUrl: string,
  client: ReplayFallback,
  logger: Logger,
  opts: ReplayTxnsOptions = {},
): Promise<ReplayTxns> {
  let lean: H2UnaryClient | undefined;
  try {
    lean = await H2UnaryClient.connect(clientUrl);
  } catch (err) {
    logger.warn(
      { err: asError(err).message },
      'the lean gRPC connection to the replay etcd failed; replaying through the full etcd client',
    );
  }
  return new Txns(lean, client, logger, opts.signal, opts.callTimeoutMs ?? REPLAY_CALL_TIMEOUT_MS);
}

/**
 * `work` bounded by `signal` and a deadline, for calls that take no signal: the call itself may go on in
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
    private readonly client: ReplayFallback,
    private readonly logger: Logger,
    private readonly signal: AbortSignal | undefined,
    private readonly timeoutMs: number,
  ) {}

  get path(): 'lean' | 'client' {
    return this.lean ? 'lean' : 'client';
  }

  async commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number> {
    if (!this.lean) return this.commitThroughClient(ops);
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
   * again through the full client, which then fails with etcd's own message if etcd refuses it again.
   */
  private async takeOver(err: H2CallError, ops: readonly ReplayOp[], expectedRevision: number): Promise<number> {
    this.logger.warn(
      { err, revision: expectedRevision },
      'a replay transaction failed on the lean gRPC path; going on through the full etcd client',
    );
    const lean = this.lean;
    this.lean = undefined;
    await lean?.close().catch(() => undefined);
    const now = await bounded(this.client.currentRevision(2 * this.timeoutMs), 'reading the revision', this.signal, this.timeoutMs);
    if (now === expectedRevision) return now;
    if (now === expectedRevision - 1) return this.commitThroughClient(ops);
    // Out of step either way: the caller reports the revision etcd is at against the one expected.
    return now;
  }

  private commitThroughClient(ops: readonly ReplayOp[]): Promise<number> {
    return bounded(this.client.txn(ops, 2 * this.timeoutMs), 'a replay transaction', this.signal, this.timeoutMs);
  }

  async close(): Promise<void> {
    const lean = this.lean;
    this.lean = undefined;
    await lean?.close();
  }
}
