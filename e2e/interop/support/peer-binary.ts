/**
 * Where the Go etcd-backup-restore binary (the peer the interop suite runs against) is: ETCDBRCTL_PEER,
 * checked to exist and to answer `--version`. The suite never runs without it: a quiet skip would report
 * interop as checked when nothing was.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';

export const PEER_VARIABLE = 'ETCDBRCTL_PEER';

/** Thrown when ETCDBRCTL_PEER is unset or names no usable Go etcdbrctl. */
export class PeerBinaryError extends Error {
  override readonly name = 'PeerBinaryError';
}

/** The Go binary's path and its `--version` output; throws a PeerBinaryError saying what to set. */
export function resolvePeerBinary(env: NodeJS.ProcessEnv = process.env): { path: string; version: string } {
  const path = env[PEER_VARIABLE];
  const how =
    `set ${PEER_VARIABLE} to the path of the Go etcd-backup-restore binary (etcdbrctl v0.23, v0.41 or v0.43), ` +
    `e.g. ${PEER_VARIABLE}=/path/to/etcdbrctl npm run interop`;
  if (path === undefined || path === '') throw new PeerBinaryError(`the interop suite needs the Go etcdbrctl: ${how}`);
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new PeerBinaryError(`${PEER_VARIABLE}=${path} is not an executable file: ${how}`);
  }
  const run = spawnSync(path, ['--version'], { encoding: 'utf8', timeout: 30_000 });
  if (run.status !== 0) {
    throw new PeerBinaryError(`${PEER_VARIABLE}=${path} --version failed (exit ${String(run.status)}): ${run.stderr}${run.stdout}`);
  }
  return { path, version: `${run.stdout}${run.stderr}`.trim() };
}
