/**
 * `etcdbrctl restore` as a process from a real S3 emulator (s3rver) behind a proxy that goes silent: it
 * forwards the restore's GET of one object, passes on the answer's headers and then holds the body, as a store
 * that accepted a download and stopped sending. The restore must end at the store stall deadline with an error
 * naming the object and the store (base full snapshot and delta alike), and on SIGINT at once saying it was
 * interrupted; either way the data dir is as it was (absent, or the empty dir it was) and no `<data-dir>.part`
 * is left.
 */
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openS3Store } from '../snapstore/src/providers/s3.js';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../snapstore/test/support/s3rver.js';
import { startStatusProxy, type StatusProxy } from '../snapstore/test/support/status-proxy.js';
import { STORE_STALL_TIMEOUT_ENV } from '../src/cli/deadlines.js';
import { startEtcdWithClient, type EtcdWithClient } from '../test/support/etcd.js';
import { baseSnapshot, writeSmallPutChain } from '../test/support/restore-chain.js';
import { startCli } from './support/cli-process.js';
import { waitFor } from './support/sidecar.js';

const BUCKET = 'backups';
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

describe('etcdbrctl restore from a store that stops sending', () => {
  let etcd: EtcdWithClient;
  let s3: S3rverInstance;
  let store: SnapStore;
  let dir: string;
  let credentialsFile: string;
  let baseName: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-store-stall-'));
    s3 = await startS3rver({ bucket: BUCKET });
    store = await openS3Store({
      provider: 'S3',
      container: BUCKET,
      prefix: 'etcd-main/v2',
      endpointOverride: s3.endpoint,
      credentials: S3RVER_CREDENTIALS,
      maxParallelChunkUploads: 2,
      minChunkSize: 5 << 20,
      tempDir: dir,
    });
    etcd = await startEtcdWithClient('etcdbr-e2e-store-stall-etcd-');
    await etcd.client.put('/before/base').value('1');
    const base = await baseSnapshot(etcd.client, store);
    baseName = base.snapName;
    await writeSmallPutChain(store, base, { revisions: 200, perDelta: 50, keySpace: 20, valueBytes: 16, compression: undefined });
    credentialsFile = join(dir, 's3.json');
    await writeFile(credentialsFile, JSON.stringify(S3RVER_CREDENTIALS));
  }, 120_000);

  afterAll(async () => {
    await store?.close();
    await etcd?.cleanup();
    await s3?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** A proxy in front of s3rver that holds the body of every GET whose URL contains `marker`. */
  async function stallingProxy(marker: string, stall: 'answer' | 'body' = 'body'): Promise<StatusProxy> {
    const proxy = await startStatusProxy(s3.endpoint, marker);
    proxy.stall = stall;
    cleanups.push(() => proxy.stop());
    return proxy;
  }

  function restore(proxy: StatusProxy, dataDir: string, stallTimeout: string) {
    return startCli(
      [
        'restore',
        '--storage-provider=S3',
        `--store-container=${BUCKET}`,
        '--store-prefix=etcd-main',
        `--store-endpoint-override=${proxy.url}`,
        `--data-dir=${dataDir}`,
        '--initial-cluster=default=http://127.0.0.1:2380',
        '--initial-advertise-peer-urls=http://127.0.0.1:2380',
        `--restoration-temp-snapshots-dir=${join(dir, 'restore-tmp')}`,
      ],
      { AWS_APPLICATION_CREDENTIALS_JSON: credentialsFile, [STORE_STALL_TIMEOUT_ENV]: stallTimeout },
      cleanups,
    );
  }

  it('a stalled base full snapshot ends the restore at the stall deadline, naming object and store; no data dir', async () => {
    const proxy = await stallingProxy('/Full-');
    const dataDir = join(dir, 'base-stalled.etcd');
    const { exited } = restore(proxy, dataDir, '2s');
    const exit = await exited;
    expect(exit.code, exit.stderr).toBe(1);
    expect(proxy.stalled).toBeGreaterThan(0);
    expect(exit.stderr).toContain(
      `fetch s3://${BUCKET}/etcd-main/v2/${baseName}: the S3 endpoint ${proxy.url} stopped sending for 2s (stalled), giving up on the download`,
    );
    expect(exit.stderr).not.toContain('Successfully restored');
    expect(await exists(dataDir)).toBe(false);
    expect(await exists(`${dataDir}.part`)).toBe(false);
  }, 60_000);

  it('a stalled delta ends the restore at the stall deadline; the empty data dir stays as it was', async () => {
    const proxy = await stallingProxy('/Incr-');
    const dataDir = join(dir, 'delta-stalled.etcd');
    await mkdir(dataDir);
    const { exited } = restore(proxy, dataDir, '2s');
    const exit = await exited;
    expect(exit.code, exit.stderr).toBe(1);
    expect(proxy.stalled).toBeGreaterThan(0);
    expect(exit.stderr).toMatch(
      new RegExp(
        `fetch s3://${BUCKET}/etcd-main/v2/Incr-\\d{8}-\\d{8}-\\d+: the S3 endpoint ${proxy.url.replaceAll('.', '\\.')} stopped sending for 2s \\(stalled\\), giving up on the download`,
      ),
    );
    expect(await readdir(dataDir)).toEqual([]);
    expect(await exists(`${dataDir}.part`)).toBe(false);
  }, 60_000);

  it.each(['answer', 'body'] as const)(
    'SIGINT while the store holds its %s ends the restore at once, saying it was interrupted; no data dir',
    async (stall) => {
      const proxy = await stallingProxy('/Full-', stall);
      const dataDir = join(dir, `interrupted-${stall}.etcd`);
      // A deadline far beyond the test's timeout: only the signal can end this restore in time.
      const { child, exited } = restore(proxy, dataDir, '1h');
      await waitFor(() => proxy.stalled > 0, 'the restore to start downloading the base', 30_000, 20);
      child.kill('SIGINT');
      const exit = await exited;
      expect(exit.code, exit.stderr).toBe(1);
      expect(exit.stderr).toContain(
        'Error: etcdbrctl restore was interrupted (received SIGINT) before it finished; the data dir was left as it was',
      );
      expect(exit.stderr).not.toContain('stalled');
      expect(await exists(dataDir)).toBe(false);
      expect(await exists(`${dataDir}.part`)).toBe(false);
    },
    60_000,
  );
});
