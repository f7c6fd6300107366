/**
 * Shared pieces of the k8s tests: a recording logger, snapshot records, seeded leases, temp dirs, a
 * self-signed cert. The fake API server with a client on it is test/support/fake-kube-fixture.ts.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newSnapshot } from '@etcdbrctl/snapstore';
import type { Logger, Snapshot } from '@etcdbrctl/snapstore';
import { writeSelfSignedCert } from '../support/certs.js';
import { LEASES, type FakeKubeApiServer, type KubeObject } from '../support/fake-kube.js';

export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: object;
  msg: string;
}

export function recordingLogger(): Logger & { lines: LogLine[]; warnings(): string[] } {
  const lines: LogLine[] = [];
  const log =
    (level: LogLine['level']) =>
    (obj: object | string, msg?: string): void => {
      lines.push(typeof obj === 'string' ? { level, obj: {}, msg: obj } : { level, obj, msg: msg ?? '' });
    };
  return {
    lines,
    debug: log('debug'),
    info: log('info'),
    warn: log('warn'),
    error: log('error'),
    warnings: () =>
      lines
        .filter((l) => l.level === 'warn')
        .map((l) => {
          const err = (l.obj as { err?: unknown }).err;
          return `${l.msg}${err instanceof Error ? `: ${err.message}` : ''}`;
        }),
  };
}

export function fullSnapshot(lastRevision: number, createdOn: Date): Snapshot {
  return newSnapshot({ kind: 'Full', startRevision: 0, lastRevision, createdOn });
}

export function deltaSnapshot(startRevision: number, lastRevision: number, createdOn: Date): Snapshot {
  return newSnapshot({ kind: 'Incr', startRevision, lastRevision, createdOn });
}

/** Seeds a Lease the way etcd-druid creates it: no holder unless given. */
export function seedLease(
  fake: FakeKubeApiServer,
  namespace: string,
  name: string,
  spec: Record<string, string | number> = {},
): KubeObject {
  return fake.seed(LEASES, {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name, namespace, labels: { 'app.kubernetes.io/managed-by': 'etcd-druid' } },
    spec,
  });
}

export interface TempDir {
  path: string;
  remove(): Promise<void>;
}

export async function tempDir(prefix = 'etcdbr-k8s-'): Promise<TempDir> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

/** A self-signed certificate for 127.0.0.1 (openssl is part of the base image). */
export async function selfSignedCert(dir: string): Promise<{ cert: string; key: string; certFile: string }> {
  const { certFile, keyFile } = await writeSelfSignedCert(dir, 'kubernetes');
  return { cert: await readFile(certFile, 'utf8'), key: await readFile(keyFile, 'utf8'), certFile };
}

/** MicroTime as the apiserver stores it for a JavaScript Date. */
export function micro(d: Date): string {
  return d.toISOString().replace(/Z$/, '000Z');
}
