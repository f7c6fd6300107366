import { resolvePeerBinary } from './peer-binary.js';

/** Fails the whole interop run at once, before any test, when ETCDBRCTL_PEER names no usable Go binary. */
export default function setup(): void {
  const peer = resolvePeerBinary();
  process.stdout.write(`interop peer: ${peer.path} (${peer.version.split('\n').join('; ')})\n`);
}
