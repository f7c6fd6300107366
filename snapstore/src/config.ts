import type { SnapshotEncryption } from './encryption.js';
import type { Logger } from './logger.js';

/**
 * Fully resolved store configuration. The CLI builds it from flags, environment and credential files;
 * the snapstore never reads process.env itself.
 */
export interface StoreConfigBase {
  /** Bucket / container name. For Local, informational (the directory is `rootDir`). */
  container: string;
  /** Effective prefix, always ending in `v2` (upstream `path.Join(--store-prefix, "v2")`). */
  prefix: string;
  /** `--store-endpoint-override`; a parsed absolute URL string or undefined. */
  endpointOverride?: string;
  /** `--max-parallel-chunk-uploads` (> 0). */
  maxParallelChunkUploads: number;
  /** `--min-chunk-size` in bytes (>= 5 MiB). */
  minChunkSize: number;
  /** `--snapstore-temp-directory`: scratch space for providers that need it. */
  tempDir: string;
  /**
   * Ours: a fetch whose store does not answer, or sends no byte while the reader waits, for this long ends
   * with E_UNREACHABLE (default DEFAULT_FETCH_STALL_MS, a minute). Not a limit on the whole download. Local
   * has none: a hung filesystem read cannot be cancelled.
   */
  fetchStallTimeoutMs?: number;
  logger?: Logger;
  /** age keys: recipients for new encrypted snapshots, identities for reading encrypted ones. Default: none. */
  encryption?: SnapshotEncryption;
  /**
   * What the flags that configured this store begin with, for messages that name them: '' (`--store-container`),
   * `source-` (a copy's source, `--source-store-container`) or `secondary-`. Default ''.
   */
  flagPrefix?: string;
}

export interface LocalStoreConfig extends StoreConfigBase {
  provider: 'Local';
  /** Absolute directory that holds `<prefix>/...` (upstream: `$HOME/<container>`). */
  rootDir: string;
}

/** S3 credentials and options, as read from `AWS_APPLICATION_CREDENTIALS[_JSON]` (upstream `pkg/snapstore/s3_snapstore.go`). */
export interface S3Credentials {
  region?: string;
  accessKeyID?: string;
  secretAccessKey?: string;
  /** Deprecated endpoint from the credential file; `--store-endpoint-override` wins. */
  endpoint?: string;
  s3ForcePathStyle?: boolean;
  insecureSkipVerify?: boolean;
  /** PEM bundle trusted in addition to the system roots (TLS 1.3 minimum, as upstream). */
  trustedCaCert?: string;
  sseCustomerKey?: string;
  sseCustomerAlgorithm?: string;
  roleARN?: string;
  /** Path of the web-identity token file (dir form: the `token` file; JSON form: `tokenPath`). */
  tokenPath?: string;
  requestChecksumCalculation?: 'when_supported' | 'when_required';
  responseChecksumValidation?: 'when_supported' | 'when_required';
}

export interface S3StoreConfig extends StoreConfigBase {
  provider: 'S3';
  /** undefined = the AWS SDK default credential chain (no credential env var set). */
  credentials?: S3Credentials;
}

/** Azure Blob credentials (`AZURE_APPLICATION_CREDENTIALS[_JSON]`). */
export interface AbsCredentials {
  storageAccount: string;
  storageKey: string;
  /** Deprecated; default `blob.core.windows.net`. */
  domain?: string;
}

export interface AbsStoreConfig extends StoreConfigBase {
  provider: 'ABS';
  credentials: AbsCredentials;
}

/** GCS credentials (`GOOGLE_APPLICATION_CREDENTIALS`): the parsed service-account or external-account JSON. */
export interface GcsCredentials {
  /** Path of the credentials JSON file. */
  keyFile?: string;
  /** Parsed JSON of that file. */
  json?: Record<string, unknown>;
  projectId?: string;
  /** Deprecated sibling file `storageAPIEndpoint`. */
  storageAPIEndpoint?: string;
}

export interface GcsStoreConfig extends StoreConfigBase {
  provider: 'GCS';
  /** undefined with an `http://` endpoint override = an emulator without auth. */
  credentials?: GcsCredentials;
}

/**
 * OpenStack Keystone v3 credentials for Swift (`OPENSTACK_APPLICATION_CREDENTIALS[_JSON]`, or the `OS_*`
 * environment). Exactly one of password and application credential is set.
 */
export interface SwiftCredentials {
  /** Keystone URL, e.g. `https://keystone.example.com/v3` (without `/v3`, it is added). */
  authURL: string;
  /** Domain of the user and of the project (`domainName`; `OS_USER_DOMAIN_NAME`/`OS_PROJECT_DOMAIN_NAME`). */
  userDomainName?: string;
  projectDomainName?: string;
  /** Project (tenant) the token is scoped to; password authentication only. */
  tenantName?: string;
  tenantId?: string;
  /** Region of the object-store endpoint in the catalog; any region when undefined. */
  region?: string;
  password?: { username: string; password: string };
  applicationCredential?: { id: string; name?: string; secret: string };
}

export interface SwiftStoreConfig extends StoreConfigBase {
  provider: 'Swift';
  credentials: SwiftCredentials;
}

/** Alibaba Cloud OSS credentials (`ALICLOUD_APPLICATION_CREDENTIALS[_JSON]`). */
export interface OssCredentials {
  /** e.g. `https://oss-eu-central-1.aliyuncs.com`. */
  storageEndpoint: string;
  accessKeyID: string;
  accessKeySecret: string;
}

export interface OssStoreConfig extends StoreConfigBase {
  provider: 'OSS';
  credentials: OssCredentials;
}

/**
 * An S3-compatible store reached with static keys and path-style addressing: Dell ECS (`ECS_*`
 * environment) and OpenShift Container Storage (`OPENSHIFT_APPLICATION_CREDENTIALS[_JSON]`).
 */
export interface S3CompatibleCredentials {
  endpoint: string;
  region: string;
  accessKeyID: string;
  secretAccessKey: string;
  /** An endpoint without scheme is reached over http instead of https. */
  disableSSL: boolean;
  insecureSkipVerify: boolean;
}

export interface EcsStoreConfig extends StoreConfigBase {
  provider: 'ECS';
  credentials: S3CompatibleCredentials;
}

export interface OcsStoreConfig extends StoreConfigBase {
  provider: 'OCS';
  credentials: S3CompatibleCredentials;
}

export type StoreConfig =
  LocalStoreConfig | S3StoreConfig | AbsStoreConfig | GcsStoreConfig | SwiftStoreConfig | OssStoreConfig | EcsStoreConfig | OcsStoreConfig;
