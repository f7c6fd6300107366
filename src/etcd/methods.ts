/**
 * The methods the client calls, as the transport takes them (GrpcMethod: a path and two message codecs), made
 * from the service tables generated from rpc.proto (gen/), so no path is spelt by hand and a method that is not
 * generated (scripts/gen-proto.mjs lists them) is not there to call.
 */
import {
  AuthDefinition,
  ClusterDefinition,
  KVDefinition,
  LeaseDefinition,
  MaintenanceDefinition,
  WatchDefinition,
} from './gen/etcd/api/etcdserverpb/rpc_pb.js';
import type { GrpcMethod } from './grpc.js';
import type { MessageCodec } from './grpc-frame.js';

/** What the generator writes for a service: its full name, and each method's name and message codecs. */
interface ServiceTable {
  readonly fullName: string;
  readonly methods: Readonly<
    Record<string, { readonly name: string; readonly requestType: MessageCodec<unknown>; readonly responseType: MessageCodec<unknown> }>
  >;
}

type MessageOf<C> = C extends MessageCodec<infer T> ? T : never;

type Methods<S extends ServiceTable> = {
  readonly [K in keyof S['methods']]: GrpcMethod<MessageOf<S['methods'][K]['requestType']>, MessageOf<S['methods'][K]['responseType']>>;
};

function methodsOf<S extends ServiceTable>(service: S): Methods<S> {
  const methods: Record<string, GrpcMethod<unknown, unknown>> = {};
  for (const [key, m] of Object.entries(service.methods)) {
    methods[key] = { path: `/${service.fullName}/${m.name}`, input: m.requestType, output: m.responseType };
  }
  // The loop gives every key of the table its method; TypeScript cannot follow a mapped type through it.
  return methods as Methods<S>;
}

export const KV = methodsOf(KVDefinition);
export const Watch = methodsOf(WatchDefinition);
export const Lease = methodsOf(LeaseDefinition);
export const Cluster = methodsOf(ClusterDefinition);
export const Maintenance = methodsOf(MaintenanceDefinition);
export const Auth = methodsOf(AuthDefinition);
