/**
 * SHA-256 on a worker thread. Without SHA extensions (common on cloud VMs) sha256 runs at ~350 MB/s, about
 * 3 CPU-seconds per GiB on the thread that also reads etcd's snapshot stream and feeds the codec and the
 * store; hashing on a second thread lets both run at once, which is what keeps a full snapshot close to
 * `etcdctl snapshot save` (that tool does not hash at all).
 *
 * Bytes are staged into fixed batches and moved (transferred, not copied) to the worker; at most
 * `maxInFlight` batches are outstanding, so memory is bounded and a slow hasher slows the stream instead
 * of queueing it.
 */
import { asError, EtcdbrError } from '../errors.js';
import { Worker } from 'node:worker_threads';

/** The worker's whole program: inline, so it runs the same from src (tsx, vitest) and from dist. */
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const hash = createHash('sha256');
parentPort.on('message', (msg) => {
  if (msg.type === 'data') {
    hash.update(new Uint8Array(msg.buffer, 0, msg.length));
    parentPort.postMessage({ type: 'ack', buffer: msg.buffer }, [msg.buffer]);
  } else if (msg.type === 'digest') {
    const d = hash.digest();
    parentPort.postMessage({ type: 'digest', digest: d.buffer.slice(d.byteOffset, d.byteOffset + d.length) });
  }
});
`;

export interface OffThreadSha256Options {
  /** Bytes per message to the worker (default 256 KiB: messages stay rare, staging memory small). */
  batchBytes?: number;
  /** Batches outstanding at the worker before `update` waits (default 4). */
  maxInFlight?: number;
}

type WorkerReply = { type: 'ack'; buffer: ArrayBuffer } | { type: 'digest'; digest: ArrayBuffer };

export class OffThreadSha256 {
  private readonly worker: Worker;
  private readonly batchBytes: number;
  private readonly maxInFlight: number;
  /** Batch buffers back from the worker, reused so steady state allocates nothing. */
  private readonly free: ArrayBuffer[] = [];
  private staging: Uint8Array;
  private staged = 0;
  private inFlight = 0;
  private waiters: Array<() => void> = [];
  private digestWaiter: { resolve: (d: Buffer) => void; reject: (e: Error) => void } | undefined;
  private failure: Error | undefined;
  private closed = false;

  constructor(opts: OffThreadSha256Options = {}) {
    this.batchBytes = opts.batchBytes ?? 256 * 1024;
    this.maxInFlight = opts.maxInFlight ?? 4;
    this.staging = new Uint8Array(this.batchBytes);
    this.worker = new Worker(WORKER_SOURCE, { eval: true });
    // An idle hasher must never keep the process alive (e.g. a snapshot abandoned before digest()); while
    // it owes an answer it must, or a process waiting on nothing else could exit mid-hash.
    this.worker.unref();
    this.worker.on('message', (msg: WorkerReply) => this.onMessage(msg));
    this.worker.on('error', (err) => this.fail(asError(err)));
    this.worker.on('exit', (code) => {
      if (!this.closed) this.fail(new EtcdbrError('E_FAILED', `sha256 worker exited with code ${code}`));
    });
  }

  /** Adds bytes; resolves once they are staged and the worker is not too far behind. */
  async update(data: Uint8Array): Promise<void> {
    if (this.closed) throw new EtcdbrError('E_INTERNAL', 'sha256 worker: update after close');
    let offset = 0;
    while (offset < data.length) {
      if (this.failure) throw this.failure;
      const n = Math.min(data.length - offset, this.batchBytes - this.staged);
      this.staging.set(data.subarray(offset, offset + n), this.staged);
      this.staged += n;
      offset += n;
      if (this.staged === this.batchBytes) await this.send();
    }
  }

  /** The sha256 of everything passed to `update`; the hasher is closed afterwards. */
  async digest(): Promise<Buffer> {
    if (this.closed) throw new EtcdbrError('E_INTERNAL', 'sha256 worker: digest after close');
    if (this.staged > 0) await this.send();
    if (this.failure) throw this.failure;
    const result = new Promise<Buffer>((resolve, reject) => {
      this.digestWaiter = { resolve, reject };
    });
    this.worker.ref();
    this.worker.postMessage({ type: 'digest' });
    try {
      return await result;
    } finally {
      await this.close();
    }
  }

  /** Stops the worker; safe to call more than once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.worker.terminate();
  }

  private async send(): Promise<void> {
    while (this.inFlight >= this.maxInFlight && !this.failure) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    if (this.failure) throw this.failure;
    const buffer = this.staging.buffer as ArrayBuffer;
    const length = this.staged;
    this.inFlight += 1;
    this.worker.ref();
    this.worker.postMessage({ type: 'data', buffer, length }, [buffer]);
    this.staging = new Uint8Array(this.free.pop() ?? new ArrayBuffer(this.batchBytes));
    this.staged = 0;
  }

  private onMessage(msg: WorkerReply): void {
    if (msg.type === 'ack') {
      this.inFlight -= 1;
      this.free.push(msg.buffer);
      if (this.inFlight === 0 && !this.digestWaiter) this.worker.unref();
      this.waiters.shift()?.();
    } else {
      this.digestWaiter?.resolve(Buffer.from(msg.digest));
      this.digestWaiter = undefined;
      this.worker.unref();
    }
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const wake of this.waiters.splice(0)) wake();
    this.digestWaiter?.reject(err);
    this.digestWaiter = undefined;
  }
}
