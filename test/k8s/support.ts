/**
 * Shared pieces of the k8s tests: the fake API with a client on it, a recording logger, snapshot records,
 * temp dirs, a self-signed cert.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newSnapshot } from '@etcdbrctl/snapstore';
import type { Logger, Snapshot } from '@etcdbrctl/snapstore';
import { createKubeClient, type KubeClient } from '../../src/k8s/client.js';
import { writeSelfSignedCert } from '../support/certs.js';
import { FakeKubeApiServer, LEASES, type KubeObject } from '../support/fake-kube.js';

/** The fake API server and a client connected straight to its URL; the caller stops `fake`. */
export async function startFakeKubeWithClient(): Promise<{ fake: FakeKubeApiServer; kube: KubeClient }> {
  const fake = await FakeKubeApiServer.start();
  try {
    return { fake, kube: await createKubeClient({ kind: 'server', server: fake.url }) };
  } catch (err) {
    await fake.stop();
    throw err;
  }
}

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
export function seedLease(fake: FakeKubeApiServer, namespace: string, name: string, spec: Record<string, string | number> = {}): KubeObject {
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
