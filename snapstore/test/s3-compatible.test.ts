/**
 * Dell ECS and OpenShift Container Storage: the S3 provider with their own credential sources, against
 * s3rver (a real S3 HTTP server). ECS is configured from its ECS_* environment, OCS from an
 * OPENSHIFT_APPLICATION_CREDENTIALS directory, exactly as the CLI reads them.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EcsStoreConfig, OcsStoreConfig } from '../src/config.js';
import { credentialsModifiedTime, readCredentials } from '../src/credentials.js';
import { openSnapStore } from '../src/factory.js';
import { s3ConfigOf } from '../src/providers/s3-compatible.js';
import type { S3CompatibleCredentials } from '../src/config.js';
import { describeSnapStoreConformance, expectCode } from './conformance.js';
import type { ConformanceHarness } from './conformance.js';
import { closedPort } from './support/ports.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, UPLOAD_PART_MARKER, startS3rver } from './support/s3rver.js';

const MiB = 1024 * 1024;

function base(bucket: string, prefix: string) {
  return { container: bucket, prefix, maxParallelChunkUploads: 3, minChunkSize: 5 * MiB, tempDir: tmpdir() };
}

async function harness(provider: 'ECS' | 'OCS'): Promise<ConformanceHarness> {
  const srv = await startS3rver();
  const dir = await mkdtemp(join(tmpdir(), `etcdbr-${provider}-creds-`));
  const raw = new S3Client({
    endpoint: srv.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
  });
  const host = srv.endpoint.replace(/^http:\/\//, '');
  let credentials: S3CompatibleCredentials;
  if (provider === 'ECS') {
    // No scheme: ECS_DISABLE_SSL picks http.
    credentials = (await readCredentials(
      'ECS',
      { ECS_ENDPOINT: host, ECS_ACCESS_KEY_ID: S3RVER_ACCESS_KEY, ECS_SECRET_ACCESS_KEY: S3RVER_SECRET_KEY, ECS_DISABLE_SSL: 'true' },
      '',
    )) as S3CompatibleCredentials;
  } else {
    const d = join(dir, 'ocs');
    await mkdir(d);
    for (const [k, v] of Object.entries({
      endpoint: srv.endpoint,
      region: 'eu-1',
      accessKeyID: S3RVER_ACCESS_KEY,
      secretAccessKey: S3RVER_SECRET_KEY,
      insecureSkipVerify: 'true',
    })) {
      await writeFile(join(d, k), `${v}\n`);
    }
    credentials = (await readCredentials('OCS', { OPENSHIFT_APPLICATION_CREDENTIALS: d }, '')) as S3CompatibleCredentials;
  }
  const config = (prefix: string, c = credentials): EcsStoreConfig | OcsStoreConfig => ({
    ...base(srv.bucket, prefix),
    provider,
    credentials: c,
  });
  return {
    open: (opts) => openSnapStore({ ...config(opts?.prefix ?? 'v2'), ...(opts?.logger ? { logger: opts.logger } : {}) }),
    rawKeys: () => srv.rawKeys(),
    async putRaw(key, data) {
      await raw.send(new PutObjectCommand({ Bucket: srv.bucket, Key: key, Body: data }));
    },
    async teardown() {
      raw.destroy();
      await srv.stop();
      await rm(dir, { recursive: true, force: true });
    },
    async openUnreachable() {
      const { openS3CompatibleStore } = await import('../src/providers/s3-compatible.js');
      return openS3CompatibleStore(
        config('unreachable/v2', { ...credentials, endpoint: `http://127.0.0.1:${await closedPort()}` }) as EcsStoreConfig,
        {
          maxAttempts: 2,
          connectionTimeoutMs: 2000,
          socketTimeoutMs: 5000,
          partRetries: 1,
          partRetryBaseDelayMs: 50,
        },
      );
    },
    async openThrough(through, over) {
      const { openS3CompatibleStore } = await import('../src/providers/s3-compatible.js');
      return openS3CompatibleStore(
        { ...config('faulty/v2', { ...credentials, endpoint: await through(srv.endpoint) }), ...over } as EcsStoreConfig,
        {
          maxAttempts: 2,
          connectionTimeoutMs: 2000,
          socketTimeoutMs: 5000,
          partRetries: 1,
          partRetryBaseDelayMs: 50,
        },
      );
    },
    // s3rver cannot abort multipart uploads (405); s3.test.ts proves the abort is sent.
    ignoreLeftover: (key) => key.includes(UPLOAD_PART_MARKER),
  };
}

describeSnapStoreConformance('ECS (S3 provider, ECS_* environment, on s3rver)', () => harness('ECS'));
describeSnapStoreConformance('OCS (S3 provider, OPENSHIFT_APPLICATION_CREDENTIALS directory, on s3rver)', () => harness('OCS'));

describe('ECS and OCS configuration', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-s3c-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('ECS: region US-Standard, path-style, https unless ECS_DISABLE_SSL; the store reports ECS', async () => {
    const c = (await readCredentials(
      'ECS',
      { ECS_ENDPOINT: 'ecs.example:9021', ECS_ACCESS_KEY_ID: 'a', ECS_SECRET_ACCESS_KEY: 's' },
      '',
    )) as S3CompatibleCredentials;
    const s3 = s3ConfigOf({ ...base('b', 'v2'), provider: 'ECS', credentials: c });
    expect(s3.credentials).toEqual({
      region: 'US-Standard',
      accessKeyID: 'a',
      secretAccessKey: 's',
      endpoint: 'https://ecs.example:9021',
      s3ForcePathStyle: true,
      insecureSkipVerify: false,
    });
    const store = await openSnapStore({ ...base('b', 'v2'), provider: 'ECS', credentials: c });
    expect(store.provider).toBe('ECS');
    await store.close();
    expect(await credentialsModifiedTime('ECS', {}, '')).toBeUndefined();
  });

  it('ECS: a missing variable is named; a copy source without SOURCE_ECS_ENDPOINT uses ECS_* as upstream', async () => {
    const err = await expectCode(readCredentials('ECS', { ECS_ENDPOINT: 'h', ECS_ACCESS_KEY_ID: 'a' }, ''), 'E_CREDENTIALS');
    expect(err.message).toContain('ECS_SECRET_ACCESS_KEY');
    const c = (await readCredentials(
      'ECS',
      { ECS_ENDPOINT: 'http://h', ECS_ACCESS_KEY_ID: 'a', ECS_SECRET_ACCESS_KEY: 's' },
      'SOURCE_',
    )) as S3CompatibleCredentials;
    expect(c.endpoint).toBe('http://h');
  });

  it('OCS: each missing field is named with its file; a JSON file is checked the same way', async () => {
    const d = join(dir, 'ocs-missing');
    await mkdir(d);
    await writeFile(join(d, 'endpoint'), 'http://h');
    await writeFile(join(d, 'accessKeyID'), 'a');
    const err = await expectCode(readCredentials('OCS', { OPENSHIFT_APPLICATION_CREDENTIALS: d }, ''), 'E_CREDENTIALS');
    expect(err.message).toContain(`region is missing (file ${join(d, 'region')})`);
    expect(err.message).toContain(`secretAccessKey is missing (file ${join(d, 'secretAccessKey')})`);
    const f = join(dir, 'ocs.json');
    await writeFile(f, JSON.stringify({ endpoint: 'http://h', region: 'r', accessKeyID: 'a' }));
    const err2 = await expectCode(
      readCredentials('OCS', { SECONDARY_OPENSHIFT_APPLICATION_CREDENTIALS_JSON: f }, 'SECONDARY_'),
      'E_CREDENTIALS',
    );
    expect(err2.message).toContain(f);
    expect(err2.message).toContain('"secretAccessKey" is missing');
  });
});
