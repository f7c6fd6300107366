/**
 * The client's Transport (src/etcd/grpc.ts) on @grpc/grpc-js, carrying the same generated messages: what our own
 * transport is measured against (e2e/bench/transport.bench.ts, and the footprint bench's peer built by
 * scripts/grpc-js-peer.mjs). Plain text only (the benches' etcds); statuses become EtcdErrors as ours do.
 */
import * as grpc from '@grpc/grpc-js';
import { EtcdError, etcdErrorFromStatus } from '../../../src/etcd/errors.js';
import type { CallSettings, GrpcCall, GrpcMethod, Transport, TransportOptions } from '../../../src/etcd/grpc.js';

function metadataOf(settings: CallSettings): grpc.Metadata {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(settings.metadata ?? {})) md.set(k, v);
  return md;
}

function callOptions(settings: CallSettings): grpc.CallOptions {
  return settings.timeoutMs === undefined ? {} : { deadline: Date.now() + settings.timeoutMs };
}

function errorOf(err: grpc.ServiceError | Error, path: string): EtcdError {
  const code = (err as grpc.ServiceError).code;
  return code === undefined
    ? new EtcdError('E_ETCD_UNAVAILABLE', `${path}: ${err.message}`)
    : etcdErrorFromStatus(code, (err as grpc.ServiceError).details || `${path}: gRPC status ${code}`);
}

export class GrpcJsTransport implements Transport {
  private readonly client: grpc.Client;

  constructor(opts: TransportOptions) {
    const target = opts.endpoints.map((e) => e.replace(/^https?:\/\//, ''))[0]!;
    this.client = new grpc.Client(target, grpc.credentials.createInsecure(), {
      ...(opts.receiveWindow ? { 'grpc-node.flow_control_window': opts.receiveWindow } : {}),
      'grpc.max_receive_message_length': -1,
    });
  }

  unary<I, O>(method: GrpcMethod<I, O>, request: I, settings: CallSettings = {}): Promise<O> {
    const { path, input, output } = method;
    return new Promise((resolve, reject) => {
      const call = this.client.makeUnaryRequest(
        path,
        (m: I) => Buffer.from(input.encode(m).finish()),
        (b: Buffer) => output.decode(b),
        request,
        metadataOf(settings),
        callOptions(settings),
        (err, res) => {
          settings.signal?.removeEventListener('abort', onAbort);
          if (err) reject(errorOf(err, path));
          else resolve(res!);
        },
      );
      const onAbort = () => call.cancel();
      settings.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  async open<I, O>(method: GrpcMethod<I, O>, onMessage: (message: O) => void, settings: CallSettings = {}): Promise<GrpcCall<I>> {
    const { path, input, output } = method;
    const stream = this.client.makeBidiStreamRequest(
      path,
      (m: I) => Buffer.from(input.encode(m).finish()),
      (b: Buffer) => output.decode(b),
      metadataOf(settings),
      callOptions(settings),
    );
    let failure: EtcdError | undefined;
    const done = new Promise<void>((resolve, reject) => {
      stream.on('data', (m: O) => onMessage(m));
      stream.on('error', (err: grpc.ServiceError) => reject(failure ?? errorOf(err, path)));
      stream.on('status', (s: grpc.StatusObject) => {
        if (s.code === grpc.status.OK) resolve();
      });
    });
    done.catch(() => undefined);
    return {
      send: (m) => void stream.write(m),
      end: () => void stream.end(),
      pause: () => void stream.pause(),
      resume: () => void stream.resume(),
      cancel: (err) => {
        failure = err ?? etcdErrorFromStatus(1, `${path}: call cancelled (stopped)`);
        stream.cancel();
      },
      done,
    };
  }

  close(): void {
    this.client.close();
  }
}
