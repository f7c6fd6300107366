/**
 * The S3 client of a store (s3.ts): endpoint, region, TLS trust, checksum settings, credentials (keys or
 * web identity) and SSE-C, each checked when the store opens so that a bad setting is one clear error.
 */
import { createHash } from 'node:crypto';
import type { AgentOptions as HttpsAgentOptions, Agent as HttpsAgent } from 'node:https';
import tls from 'node:tls';
import { S3Client } from '@aws-sdk/client-s3';
import type { S3ClientConfig } from '@aws-sdk/client-s3';
import type { S3Credentials, S3StoreConfig } from '../config.js';
import { SnapStoreError } from '../errors.js';
import { nodeHttp, nodeHttps } from '../node-http.js';

/**
 * Knobs that are not upstream flags. Defaults follow upstream's constants; tests lower them to
 * fail fast against a closed port.
 */
export interface S3Tuning {
  /** Attempts per request including the first (upstream `maxRetryAttempts` = 5). */
  maxAttempts?: number;
  /** TCP/TLS connect timeout (upstream `providerConnectionTimeout` = 30 s). */
  connectionTimeoutMs?: number;
  /** Socket idle timeout, also while a fetched body is being read (upstream `downloadTimeout` = 5 min). */
  socketTimeoutMs?: number;
  /** STS endpoint for web identity (default: the SDK's regional STS endpoint). */
  stsEndpoint?: string;
  /** Retries of one failed part after the SDK's own attempts (upstream: 5). */
  partRetries?: number;
  /** Backoff before part retry i is base x 2^i (upstream: 1 s, so 1, 2, 4, 8, 16 s). */
  partRetryBaseDelayMs?: number;
  /** Time limit of one attempt of one part (upstream `chunkUploadTimeout` = 180 s). */
  partTimeoutMs?: number;
}

const DEFAULTS = { maxAttempts: 5, connectionTimeoutMs: 30_000, socketTimeoutMs: 300_000 };

/** SSE-C parameters, sent with every request that reads or writes object data. */
export interface Ssec {
  SSECustomerAlgorithm: string;
  SSECustomerKey: string;
  SSECustomerKeyMD5: string;
}

/** The SDK client of a store's configuration, and what every write request carries (SSE-C). */
export interface S3Connection {
  client: S3Client;
  /** The endpoint, for messages. */
  where: string;
  ssec: Ssec | undefined;
}

/** Creates the client for `config`: endpoint, region, TLS, checksums, credentials; E_CONFIG or E_CREDENTIALS when one is unusable. */
export async function connectS3(config: S3StoreConfig, tuning: S3Tuning): Promise<S3Connection> {
  const creds = config.credentials;
  const endpoint = parseEndpoint(config.endpointOverride ?? creds?.endpoint);
  const ssec = sseCustomer(creds);
  const t = { ...DEFAULTS, ...tuning };

  const clientConfig: S3ClientConfig = {
    maxAttempts: t.maxAttempts,
    forcePathStyle: creds?.s3ForcePathStyle ?? false,
    requestHandler: {
      connectionTimeout: t.connectionTimeoutMs,
      socketTimeout: t.socketTimeoutMs,
      httpAgent: new (nodeHttp().Agent)({ keepAlive: true, maxSockets: 64 }),
      httpsAgent: httpsAgent(creds),
    },
  };
  // Region: from the credentials; an S3-compatible endpoint without one gets the SDK's classic
  // default; with no credentials at all the SDK's own chain (AWS_REGION, profile) decides.
  const region = creds?.region || (endpoint && creds ? 'us-east-1' : undefined);
  if (region) clientConfig.region = region;
  if (endpoint) clientConfig.endpoint = endpoint;
  if (creds?.requestChecksumCalculation) {
    clientConfig.requestChecksumCalculation = creds.requestChecksumCalculation === 'when_required' ? 'WHEN_REQUIRED' : 'WHEN_SUPPORTED';
  }
  if (creds?.responseChecksumValidation) {
    clientConfig.responseChecksumValidation = creds.responseChecksumValidation === 'when_required' ? 'WHEN_REQUIRED' : 'WHEN_SUPPORTED';
  }
  const credentials = await credentialProvider(creds, region, t.stsEndpoint);
  if (credentials) clientConfig.credentials = credentials;

  const where = endpoint ?? (region ? `https://s3.${region}.amazonaws.com` : 'the default AWS S3 endpoint');
  return { client: new S3Client(clientConfig), where, ssec };
}

function parseEndpoint(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new SnapStoreError('E_CONFIG', `S3 endpoint ${JSON.stringify(raw)} is not an absolute URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new SnapStoreError('E_CONFIG', `S3 endpoint ${raw} must use http or https`);
  }
  return raw;
}

function httpsAgent(creds: S3Credentials | undefined): HttpsAgent {
  const opts: HttpsAgentOptions = { keepAlive: true, maxSockets: 64 };
  if (creds?.insecureSkipVerify) opts.rejectUnauthorized = false;
  if (creds?.trustedCaCert) {
    // In addition to, not instead of, the system roots; TLS 1.3 minimum as upstream sets it there.
    opts.ca = [...tls.rootCertificates, creds.trustedCaCert];
    opts.minVersion = 'TLSv1.3';
  }
  return new (nodeHttps().Agent)(opts);
}

/**
 * SSE-C: both key and algorithm, or neither. The key is the raw key string as in upstream's
 * credential file; S3 wants it base64-encoded with base64(md5(key)) beside it. AES256 (the only
 * algorithm S3 accepts) needs exactly 32 key bytes; checking that here turns a per-request 400
 * into one clear error at start.
 */
function sseCustomer(creds: S3Credentials | undefined): Ssec | undefined {
  const key = creds?.sseCustomerKey ?? '';
  const algorithm = creds?.sseCustomerAlgorithm ?? '';
  if (key === '' && algorithm === '') return undefined;
  if (key === '' || algorithm === '') {
    throw new SnapStoreError(
      'E_CREDENTIALS',
      `S3 SSE-C needs both sseCustomerKey and sseCustomerAlgorithm in the credentials; only ${key === '' ? 'sseCustomerAlgorithm' : 'sseCustomerKey'} is set`,
    );
  }
  const bytes = Buffer.from(key, 'utf8');
  if (algorithm === 'AES256' && bytes.length !== 32) {
    throw new SnapStoreError(
      'E_CREDENTIALS',
      `S3 SSE-C key for AES256 must be 32 bytes, the configured sseCustomerKey has ${bytes.length}`,
    );
  }
  return {
    SSECustomerAlgorithm: algorithm,
    SSECustomerKey: bytes.toString('base64'),
    SSECustomerKeyMD5: createHash('md5').update(bytes).digest('base64'),
  };
}

async function credentialProvider(
  creds: S3Credentials | undefined,
  region: string | undefined,
  stsEndpoint: string | undefined,
): Promise<S3ClientConfig['credentials'] | undefined> {
  if (!creds) return undefined; // SDK default chain
  if (creds.accessKeyID) {
    if (!creds.secretAccessKey) {
      throw new SnapStoreError('E_CREDENTIALS', 'S3 credentials have accessKeyID but no secretAccessKey');
    }
    return { accessKeyId: creds.accessKeyID, secretAccessKey: creds.secretAccessKey };
  }
  if (creds.roleARN || creds.tokenPath) {
    if (!creds.roleARN || !creds.tokenPath) {
      throw new SnapStoreError('E_CREDENTIALS', 'S3 web identity needs both roleARN and the token file (token / tokenPath)');
    }
    // The token file is re-read on every refresh, so a rotated projected token is picked up.
    const { fromTokenFile } = await import('@aws-sdk/credential-provider-web-identity');
    return fromTokenFile({
      roleArn: creds.roleARN,
      webIdentityTokenFile: creds.tokenPath,
      roleSessionName: `etcdbrctl-${Date.now()}`,
      clientConfig: { ...(region ? { region } : {}), ...(stsEndpoint ? { endpoint: stsEndpoint } : {}) },
    });
  }
  return undefined;
}
