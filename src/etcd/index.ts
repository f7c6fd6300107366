/**
 * The one door to etcd: the client interface and its types, how a client is made, its errors, and the etcd
 * binaries and child processes this project runs. Nothing outside src/etcd imports a module behind it
 * (test/architecture/etcd-boundary). Importing the door is cheap: the client, its transport on node:http2 and
 * the generated protobuf code load with the first client made (connect.ts).
 */
export type {
  AllKeysWatch,
  CallOptions,
  EtcdClient,
  EtcdKvHash,
  EtcdMember,
  EtcdMemberList,
  EtcdStatus,
  LeanTxns,
  LeaseTimeToLive,
  LocalEtcdClient,
  ReplayOp,
  SignalOptions,
  SnapshotChunk,
  SnapshotStream,
  WatchHandlers,
} from './types.js';
export {
  connectLocalEtcd,
  createEtcdClient,
  createEtcdClientFromFlags,
  ETCD_FLOW_CONTROL_WINDOW_BYTES,
  type EtcdClientOptions,
  type EtcdConnectionFlags,
} from './connect.js';
export { EtcdError, ETCD_UNREACHABLE_CODES, etcdErrorFromStatus, isEtcdError, type EtcdErrorCode } from './errors.js';
export { CompactedRevisionError, WATCH_CANCEL_TIMEOUT_MS } from './watch.js';
export { LeanCallError, LeanDeadlineError } from './lean-errors.js';
export { atLeast35, etcdMinorVersion, etcdVersion, findEtcdBinaries, type EtcdBinaries } from './binaries.js';
export { killOnProcessExit, startLocalEtcd, type LocalEtcd, type LocalEtcdOptions } from './local-etcd.js';
export { ephemeralPortRange, freePort, keptPorts, saveKeptPorts, type KeptPorts } from './ports.js';
