/**
 * How a restore's online replay writes revisions into the replay etcd it started: one unconditional
 * transaction per source revision, strictly one after another (etcd gives each the next revision, and
 * concurrent calls would be applied in any order). The transactions go through the lean HTTP/2 client
 * (LocalEtcdClient.openLeanTxns): through the client's one transport on node:http2 the replay ran at 0.3-0.6x
 * the rate (docs/design-decisions.md, "One etcd transport, and the replay's lean client"). The one transport
 * takes over when the lean path fails, so an error etcd returns reaches the operator with etcd's own message
 * (the lean client does not decode gRPC statuses). Every call carries the restore's stop signal and the
 * per-call deadline, so a stalled etcd fails the replay instead of hanging it.
 */
import type { Logger } from '@etcdbrctl/snapstore';
import { asError, EtcdbrError } from '../errors.js';
import { LeanCallError, LeanDeadlineError, type LeanTxns, type LocalEtcdClient, type ReplayOp } from '../etcd/index.js';
import { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';

export type { ReplayOp } from '../etcd/index.js';
export { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';

export interface ReplayTxnsOptions {
  /** Ends the pending call and every later one with its reason (the restore's stop signal). */
  signal?: AbortSignal | undefined;
  /** The deadline of each call (default REPLAY_CALL_TIMEOUT_MS): a stalled etcd fails the replay, never hangs it. */
  callTimeoutMs?: number | undefined;
}

export interface ReplayTxns {
  /**
   * Commits one revision's operations as one transaction and resolves with the revision etcd gave it
   * (`expectedRevision` when the replay is in step). Calls must not overlap.
   */
  commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number>;
  /** Which path the transactions go through now. */
  readonly path: 'lean' | 'client';
  close(): Promise<void>;
}

/** Opens the replay's transactions to `client`'s etcd; without a lean connection every transaction uses the client. */
export async function openReplayTxns(client: LocalEtcdClient, logger: Logger, opts: ReplayTxnsOptions = {}): Promise<ReplayTxns> {
  let lean: LeanTxns | undefined;
  try {
    lean = await client.openLeanTxns();
  } catch (err) {
    logger.warn({ err: asError(err).message }, 'the lean gRPC connection to the replay etcd failed; replaying through the etcd client');
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
    private lean: LeanTxns | undefined,
    private readonly client: LocalEtcdClient,
    private readonly logger: Logger,
    private readonly signal: AbortSignal | undefined,
    private readonly timeoutMs: number,
  ) {}

  get path(): 'lean' | 'client' {
    return this.lean ? 'lean' : 'client';
  }

  async commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number> {
    if (!this.lean) return this.commitThroughClient(ops);
    try {
      return await this.lean.txn(ops, { signal: this.signal, timeoutMs: this.timeoutMs });
    } catch (err) {
      if (err instanceof LeanDeadlineError) {
        throw new EtcdbrError(
          'E_UNAVAILABLE',
          `the replay etcd did not commit revision ${expectedRevision} within ${this.timeoutMs} ms (stalled or overloaded): stopping the restore`,
          { cause: err },
        );
      }
      if (!(err instanceof LeanCallError)) throw err;
      return this.takeOver(err, ops, expectedRevision);
    }
  }

  /**
   * The lean call failed: etcd refused the transaction (its reason not decoded), or the connection broke
   * with the transaction applied or not. etcd's revision tells which; a transaction not applied is sent
   * again through the client, which then fails with etcd's own message if etcd refuses it again.
   */
  private async takeOver(err: LeanCallError, ops: readonly ReplayOp[], expectedRevision: number): Promise<number> {
    this.logger.warn(
      { err, revision: expectedRevision },
      'a replay transaction failed on the lean gRPC path; going on through the etcd client',
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
    const call = { timeoutMs: 2 * this.timeoutMs, ...(this.signal ? { signal: this.signal } : {}) };
    return bounded(this.client.txn(ops, call), 'a replay transaction', this.signal, this.timeoutMs);
  }

  async close(): Promise<void> {
    const lean = this.lean;
    this.lean = undefined;
    await lean?.close();
  }
}
