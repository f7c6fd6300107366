import { ETCD_LINE_VARIABLE, etcdLineFor } from './etcd-line.js';
import { resolvePeerBinary } from './peer-binary.js';

/** Fails the whole interop run at once, before any test, when ETCDBRCTL_PEER names no usable Go binary. */
export default function setup(): void {
  const peer = resolvePeerBinary();
  const line = etcdLineFor(peer.version, process.env[ETCD_LINE_VARIABLE]);
  process.stdout.write(`interop peer: ${peer.path} (${peer.version.split('\n').join('; ')}), on etcd ${line}\n`);
}
