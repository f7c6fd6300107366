/**
 * Maintenance.Snapshot, read as a pull-based iterator: messages queue until the reader takes them, and the call
 * stops reading when the queue is full (HTTP/2 flow control then bounds what etcd sends ahead).
 */
import type { AuthenticatedCalls } from './authenticated.js';
import { asBuffer } from './bytes.js';
import type { EtcdError } from './errors.js';
import type { SnapshotRequest } from './gen/etcd/api/etcdserverpb/rpc_pb.js';
import type { CallSettings, GrpcCall } from './grpc.js';
import { Maintenance } from './methods.js';
import type { SnapshotChunk, SnapshotStream } from './types.js';

/**
 * Snapshot messages (32 KiB each from etcd) read ahead of the consumer before reading pauses; the receive
 * window (connect.ts) holds more behind them. Small for the same reason as that window.
 */
const SNAPSHOT_QUEUE_MESSAGES = 16;

const EMPTY = new Uint8Array(0);

export async function openSnapshotStream(calls: AuthenticatedCalls, settings: CallSettings): Promise<SnapshotStream> {
  const queue: SnapshotChunk[] = [];
  let wake: (() => void) | undefined;
  // The message handler pauses the call it is passed to, which exists by the time a message arrives.
  let paused: GrpcCall<SnapshotRequest> | undefined;
  const call = await calls.open(
    Maintenance.snapshot,
    (msg) => {
      // The blob is a view of the message's buffer, which is this chunk's alone: no copy.
      queue.push({ blob: asBuffer(msg.blob ?? EMPTY), revision: Number(msg.header?.revision ?? 0n) });
      // Back-pressure: a reader slower than etcd (an upload) leaves etcd waiting, not our memory growing.
      if (queue.length >= SNAPSHOT_QUEUE_MESSAGES) paused?.pause();
      wake?.();
    },
    settings,
  );
  paused = call;
  call.send({});
  call.end();
  let ended = false;
  let failure: EtcdError | undefined;
  call.done.then(
    () => {
      ended = true;
      wake?.();
    },
    (err: EtcdError) => {
      ended = true;
      failure = err;
      wake?.();
    },
  );
  let cancelled = false;
  const cancel = () => {
    cancelled = true;
    call.cancel();
  };
  return {
    cancel,
    [Symbol.asyncIterator]: () => ({
      next: async (): Promise<IteratorResult<SnapshotChunk>> => {
        for (;;) {
          const chunk = queue.shift();
          if (queue.length < SNAPSHOT_QUEUE_MESSAGES / 2) call.resume();
          if (chunk) return { done: false, value: chunk };
          if (failure && !(cancelled && failure.code === 'E_ETCD_CANCELLED')) throw failure;
          if (ended) return { done: true, value: undefined };
          await new Promise<void>((r) => (wake = r));
          wake = undefined;
        }
      },
      return: async (): Promise<IteratorResult<SnapshotChunk>> => {
        cancel();
        return { done: true, value: undefined };
      },
    }),
  };
}
