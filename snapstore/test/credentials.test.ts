import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import {
  credentialEnvVars,
  credentialsModifiedTime,
  readAbsCredentials,
  readCredentials,
  readGcsCredentials,
  readS3Credentials,
} from '../src/credentials.js';
import { isSnapStoreError } from '../src/errors.js';

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'etcdbr-creds-'));
});

function dir(name: string, files: Record<string, string>): string {
  const d = join(root, name);
  mkdirSync(d, { recursive: true });
  for (const [k, v] of Object.entries(files)) writeFileSync(join(d, k), v);
  return d;
}

function file(name: string, content: string | object): string {
  const p = join(root, name);
  writeFileSync(p, typeof content === 'string' ? content : JSON.stringify(content));
  return p;
}

async function credentialError(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    expect(isSnapStoreError(err, 'E_CREDENTIALS'), String(err)).toBe(true);
    return (err as Error).message;
  }
  throw new Error('expected an E_CREDENTIALS error');
}

describe('S3 credentials', () => {
  it('are undefined without any variable (AWS default chain)', async () => {
    expect(await readS3Credentials({}, '')).toBeUndefined();
    expect(await readS3Credentials({ AWS_APPLICATION_CREDENTIALS: '' }, '')).toBeUndefined();
  });

  it('read the JSON file with every key', async () => {
    const p = file('aws.json', {
      accessKeyID: 'AK',
      secretAccessKey: 'SK',
      region: 'eu-west-1',
      endpoint: 'http://localhost:4566',
      s3ForcePathStyle: true,
      insecureSkipVerify: false,
      trustedCaCert: 'PEM',
      sseCustomerKey: 'k',
      sseCustomerAlgorithm: 'AES256',
      roleARN: 'arn:aws:iam::1:role/r',
      tokenPath: '/var/run/token',
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'when_supported',
      bucketName: 'ignored',
    });
    expect(await readS3Credentials({ AWS_APPLICATION_CREDENTIALS_JSON: p }, '')).toEqual({
      accessKeyID: 'AK',
      secretAccessKey: 'SK',
      region: 'eu-west-1',
      endpoint: 'http://localhost:4566',
      s3ForcePathStyle: true,
      insecureSkipVerify: false,
      trustedCaCert: 'PEM',
      sseCustomerKey: 'k',
      sseCustomerAlgorithm: 'AES256',
      roleARN: 'arn:aws:iam::1:role/r',
      tokenPath: '/var/run/token',
      requestChecksumCalculation: 'when_required',
      responseChecksumValidation: 'when_supported',
    });
  });

  it('read one trimmed file per key from the directory; `token` becomes tokenPath', async () => {
    const d = dir('aws', {
      accessKeyID: 'AK\n',
      secretAccessKey: ' SK \n',
      region: 'eu-west-1\n',
      s3ForcePathStyle: 'true\n',
      insecureSkipVerify: 'F',
      token: 'jwt',
    });
    expect(await readS3Credentials({ AWS_APPLICATION_CREDENTIALS: d }, '')).toEqual({
      accessKeyID: 'AK',
      secretAccessKey: 'SK',
      region: 'eu-west-1',
      s3ForcePathStyle: true,
      insecureSkipVerify: false,
      tokenPath: join(d, 'token'),
    });
  });

  it('accept web identity (roleARN + token) in the directory', async () => {
    const d = dir('aws', { region: 'r', roleARN: 'arn', token: 'jwt' });
    expect(await readS3Credentials({ AWS_APPLICATION_CREDENTIALS: d }, '')).toEqual({
      region: 'r',
      roleARN: 'arn',
      tokenPath: join(d, 'token'),
    });
  });

  describe('precedence (acceptance case 47)', () => {
    it('the _JSON file wins over the directory', async () => {
      const d = dir('aws', { accessKeyID: 'DIR', secretAccessKey: 'S', region: 'r' });
      const p = file('aws.json', { accessKeyID: 'JSON', secretAccessKey: 'S', region: 'r' });
      const c = await readS3Credentials({ AWS_APPLICATION_CREDENTIALS: d, AWS_APPLICATION_CREDENTIALS_JSON: p }, '');
      expect(c?.accessKeyID).toBe('JSON');
    });

    it('a *.json file in the directory wins over per-key files; the first by name', async () => {
      const d = dir('aws', {
        accessKeyID: 'DIR',
        secretAccessKey: 'S',
        region: 'r',
        'b.json': JSON.stringify({ accessKeyID: 'B' }),
        'a.json': JSON.stringify({ accessKeyID: 'A' }),
      });
      expect((await readS3Credentials({ AWS_APPLICATION_CREDENTIALS: d }, ''))?.accessKeyID).toBe('A');
    });

    it('the JSON form is not held to the directory rules (upstream validates only the directory form)', async () => {
      const d = dir('aws', { 'creds.json': JSON.stringify({ accessKeyID: 'A' }) });
      expect(await readS3Credentials({ AWS_APPLICATION_CREDENTIALS: d }, '')).toEqual({ accessKeyID: 'A' });
    });
  });

  it('use the prefixed variables for the copy source and the secondary store', async () => {
    const primary = file('p.json', { accessKeyID: 'P' });
    const source = file('s.json', { accessKeyID: 'S' });
    const secondary = dir('sec', { accessKeyID: 'X', secretAccessKey: 'Y', region: 'r' });
    const env = {
      AWS_APPLICATION_CREDENTIALS_JSON: primary,
      SOURCE_AWS_APPLICATION_CREDENTIALS_JSON: source,
      SECONDARY_AWS_APPLICATION_CREDENTIALS: secondary,
    };
    expect((await readS3Credentials(env, ''))?.accessKeyID).toBe('P');
    expect((await readS3Credentials(env, 'SOURCE_'))?.accessKeyID).toBe('S');
    expect((await readS3Credentials(env, 'SECONDARY_'))?.accessKeyID).toBe('X');
    expect(await readS3Credentials({ AWS_APPLICATION_CREDENTIALS_JSON: primary }, 'SOURCE_')).toBeUndefined();
    expect(credentialEnvVars('S3', 'SOURCE_')).toEqual(['SOURCE_AWS_APPLICATION_CREDENTIALS_JSON', 'SOURCE_AWS_APPLICATION_CREDENTIALS']);
  });

  it.each<[string, () => Record<string, string>, RegExp]>([
    [
      'missing JSON file',
      () => ({ AWS_APPLICATION_CREDENTIALS_JSON: join(root, 'nope.json') }),
      /^AWS_APPLICATION_CREDENTIALS_JSON: cannot read credential file .*nope\.json: no such file or directory$/,
    ],
    [
      'malformed JSON',
      () => ({ AWS_APPLICATION_CREDENTIALS_JSON: file('bad.json', '{"accessKeyID": ') }),
      /^AWS_APPLICATION_CREDENTIALS_JSON: credential file .*bad\.json is not valid JSON/,
    ],
    [
      'JSON that is not an object',
      () => ({ AWS_APPLICATION_CREDENTIALS_JSON: file('arr.json', '[]') }),
      /bad|arr\.json must hold a JSON object/,
    ],
    [
      'wrong JSON type',
      () => ({ AWS_APPLICATION_CREDENTIALS_JSON: file('t.json', { s3ForcePathStyle: 'true' }) }),
      /t\.json: "s3ForcePathStyle" must be true or false/,
    ],
    [
      'missing directory',
      () => ({ AWS_APPLICATION_CREDENTIALS: join(root, 'nodir') }),
      /^AWS_APPLICATION_CREDENTIALS: cannot read credential directory .*nodir: no such file or directory$/,
    ],
    [
      'directory without region',
      () => ({ AWS_APPLICATION_CREDENTIALS: dir('a', { accessKeyID: 'A', secretAccessKey: 'S' }) }),
      /region is missing \(file .*\/a\/region\)/,
    ],
    [
      'directory without secret',
      () => ({ AWS_APPLICATION_CREDENTIALS: dir('b', { accessKeyID: 'A', region: 'r' }) }),
      /set either accessKeyID and secretAccessKey, or roleARN and token/,
    ],
    [
      'directory with roleARN but no token',
      () => ({ AWS_APPLICATION_CREDENTIALS: dir('c', { roleARN: 'x', region: 'r' }) }),
      /or roleARN and token/,
    ],
    [
      'bad bool file',
      () => ({ AWS_APPLICATION_CREDENTIALS: dir('d', { accessKeyID: 'A', secretAccessKey: 'S', region: 'r', s3ForcePathStyle: 'yes' }) }),
      /AWS_APPLICATION_CREDENTIALS: credential file .*\/d\/s3ForcePathStyle must hold true or false, got "yes"/,
    ],
    [
      'SSE key without algorithm',
      () => ({ AWS_APPLICATION_CREDENTIALS_JSON: file('sse.json', { sseCustomerKey: 'k' }) }),
      /both sseCustomerKey and sseCustomerAlgorithm must be given/,
    ],
    [
      'bad checksum option',
      () => ({ AWS_APPLICATION_CREDENTIALS_JSON: file('ck.json', { requestChecksumCalculation: 'always' }) }),
      /invalid value "always" for requestChecksumCalculation, must be when_supported or when_required/,
    ],
    [
      'malformed JSON inside the directory',
      () => ({ AWS_APPLICATION_CREDENTIALS: dir('e', { 'x.json': '{' }) }),
      /^AWS_APPLICATION_CREDENTIALS: credential file .*\/e\/x\.json is not valid JSON/,
    ],
  ])('fail clearly: %s', async (_name, env, message) => {
    expect(await credentialError(readS3Credentials(env(), ''))).toMatch(message);
  });
});

describe('ABS credentials', () => {
  it('fail without any variable', async () => {
    expect(await credentialError(readAbsCredentials({}, ''))).toMatch(
      /^unable to get credentials: set AZURE_APPLICATION_CREDENTIALS_JSON \(a JSON file\) or AZURE_APPLICATION_CREDENTIALS/,
    );
  });

  it('read JSON and directory forms, JSON first', async () => {
    const p = file('az.json', { storageAccount: 'acc', storageKey: 'key', domain: 'blob.core.chinacloudapi.cn' });
    const d = dir('az', { storageAccount: 'dacc\n', storageKey: 'dkey\n' });
    expect(await readAbsCredentials({ AZURE_APPLICATION_CREDENTIALS_JSON: p, AZURE_APPLICATION_CREDENTIALS: d }, '')).toEqual({
      storageAccount: 'acc',
      storageKey: 'key',
      domain: 'blob.core.chinacloudapi.cn',
    });
    expect(await readAbsCredentials({ AZURE_APPLICATION_CREDENTIALS: d }, '')).toEqual({ storageAccount: 'dacc', storageKey: 'dkey' });
    expect(await readAbsCredentials({ SECONDARY_AZURE_APPLICATION_CREDENTIALS: d }, 'SECONDARY_')).toEqual({
      storageAccount: 'dacc',
      storageKey: 'dkey',
    });
  });

  it('require account and key', async () => {
    const d = dir('az', { storageAccount: 'acc' });
    expect(await credentialError(readAbsCredentials({ AZURE_APPLICATION_CREDENTIALS: d }, ''))).toMatch(
      /^AZURE_APPLICATION_CREDENTIALS: credential directory .*\/az: storageKey missing$/,
    );
    const p = file('az.json', {});
    expect(await credentialError(readAbsCredentials({ AZURE_APPLICATION_CREDENTIALS_JSON: p }, ''))).toMatch(
      /storageAccount and storageKey missing/,
    );
  });
});

const SERVICE_ACCOUNT = {
  type: 'service_account',
  project_id: 'my-project-123',
  private_key_id: 'abc',
  private_key: '-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n',
  client_email: 'sa@my-project-123.iam.gserviceaccount.com',
  client_id: '1',
  auth_uri: 'https://accounts.google.com/o/oauth2/auth',
  token_uri: 'https://oauth2.googleapis.com/token',
  auth_provider_x509_cert_url: 'https://www.googleapis.com/oauth2/v1/certs',
  client_x509_cert_url: 'https://www.googleapis.com/robot/v1/metadata/x509/sa',
  universe_domain: 'googleapis.com',
};

function externalAccount(d: string): Record<string, unknown> {
  return {
    type: 'external_account',
    audience: '//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/q',
    subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
    token_url: 'https://sts.googleapis.com/v1/token',
    universe_domain: 'googleapis.com',
    service_account_impersonation_url:
      'https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa@p.iam.gserviceaccount.com:generateAccessToken',
    credential_source: { file: join(d, 'token'), format: { type: 'text' } },
  };
}

describe('GCS credentials', () => {
  it('read and validate a service account key', async () => {
    const d = dir('gcs', { 'serviceaccount.json': JSON.stringify(SERVICE_ACCOUNT), storageAPIEndpoint: 'https://storage.example.com\n' });
    const keyFile = join(d, 'serviceaccount.json');
    expect(await readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: keyFile }, '')).toEqual({
      keyFile,
      json: SERVICE_ACCOUNT,
      projectId: 'my-project-123',
      storageAPIEndpoint: 'https://storage.example.com',
    });
  });

  it('read and validate an external account with its projectID file', async () => {
    const d = dir('wif', { token: 'jwt', projectID: 'proj-1234\n' });
    const keyFile = join(d, 'credentialsConfig');
    writeFileSync(keyFile, JSON.stringify(externalAccount(d)));
    const c = await readGcsCredentials({ SOURCE_GOOGLE_APPLICATION_CREDENTIALS: keyFile }, 'SOURCE_');
    expect(c?.projectId).toBe('proj-1234');
    expect(c?.keyFile).toBe(keyFile);
  });

  it('are undefined without the variable (application default credentials), except for the copy source', async () => {
    expect(await readGcsCredentials({}, '')).toBeUndefined();
    expect(await readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: '/x' }, 'SECONDARY_')).toBeUndefined();
    expect(await credentialError(readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: '/x' }, 'SOURCE_'))).toMatch(
      /^SOURCE_GOOGLE_APPLICATION_CREDENTIALS is not set/,
    );
  });

  it.each<[string, (d: string) => Record<string, unknown>, RegExp]>([
    [
      'unknown type',
      () => ({ ...SERVICE_ACCOUNT, type: 'authorized_user' }),
      /"type" must be "service_account" or "external_account", got "authorized_user"/,
    ],
    ['bad project id', () => ({ ...SERVICE_ACCOUNT, project_id: 'My_Project' }), /"project_id" "My_Project" is not a valid project ID/],
    ['unexpected field', () => ({ ...SERVICE_ACCOUNT, extra: 'x' }), /field "extra" is not allowed in a service_account key/],
    ['missing private key', () => ({ ...SERVICE_ACCOUNT, private_key: undefined }), /"private_key" is missing/],
    [
      'wrong token url',
      (d) => ({ ...externalAccount(d), token_url: 'https://evil.example.com/token' }),
      /"token_url" must be "https:\/\/sts\.googleapis\.com\/v1\/token"/,
    ],
    [
      'wrong subject token type',
      (d) => ({ ...externalAccount(d), subject_token_type: 'urn:ietf:params:oauth:token-type:saml2' }),
      /"subject_token_type" must be/,
    ],
    [
      'credential source elsewhere',
      (d) => ({ ...externalAccount(d), credential_source: { file: '/etc/passwd', format: { type: 'text' } } }),
      /"credential_source" must be \{"file":".*\/token","format":\{"type":"text"\}\}/,
    ],
    [
      'credential source with a url',
      (d) => ({ ...externalAccount(d), credential_source: { url: 'http://169.254.169.254' } }),
      /"credential_source" must be/,
    ],
    [
      'bad impersonation url',
      (d) => ({ ...externalAccount(d), service_account_impersonation_url: 'https://example.com/x' }),
      /"service_account_impersonation_url" must match/,
    ],
    ['missing audience', (d) => ({ ...externalAccount(d), audience: undefined }), /"audience" is missing/],
  ])('reject %s, naming the variable and file', async (_n, make, message) => {
    const d = dir('g', { token: 'jwt', projectID: 'p-12345' });
    const keyFile = join(d, 'key.json');
    writeFileSync(keyFile, JSON.stringify(make(d)));
    const msg = await credentialError(readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: keyFile }, ''));
    expect(msg).toContain(`GOOGLE_APPLICATION_CREDENTIALS: GCS credential file ${keyFile}: `);
    expect(msg).toMatch(message);
  });

  it('require projectID beside external account credentials', async () => {
    const d = dir('w2', { token: 'jwt' });
    const keyFile = join(d, 'cfg.json');
    writeFileSync(keyFile, JSON.stringify(externalAccount(d)));
    expect(await credentialError(readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: keyFile }, ''))).toMatch(
      /need the project ID in .*\/w2\/projectID/,
    );
  });

  it('name the file when it is missing or malformed', async () => {
    expect(await credentialError(readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: join(root, 'no.json') }, ''))).toMatch(
      /^GOOGLE_APPLICATION_CREDENTIALS: cannot read credential file .*no\.json: no such file or directory$/,
    );
    expect(await credentialError(readGcsCredentials({ GOOGLE_APPLICATION_CREDENTIALS: file('m.json', 'nope') }, ''))).toMatch(
      /m\.json is not valid JSON/,
    );
  });
});

describe('readCredentials', () => {
  it('dispatches by provider; Local has none', async () => {
    expect(await readCredentials('Local', {}, '')).toBeUndefined();
    expect(await readCredentials('S3', {}, '')).toBeUndefined();
    await expect(readCredentials('ABS', {}, '')).rejects.toThrow(/unable to get credentials/);
  });
});

describe('credentialsModifiedTime', () => {
  const at = (p: string, seconds: number): void => utimesSync(p, seconds, seconds);

  it('is the newest mtime of the S3 static files, and changes when one is touched', async () => {
    const d = dir('aws', { accessKeyID: 'A', secretAccessKey: 'S', region: 'r', endpoint: 'ignored' });
    for (const f of ['accessKeyID', 'secretAccessKey', 'region']) at(join(d, f), 1_700_000_000);
    at(join(d, 'endpoint'), 1_800_000_000);
    const env = { AWS_APPLICATION_CREDENTIALS: d };
    expect((await credentialsModifiedTime('S3', env, ''))?.getTime()).toBe(1_700_000_000_000);
    at(join(d, 'secretAccessKey'), 1_700_000_100);
    expect((await credentialsModifiedTime('S3', env, ''))?.getTime()).toBe(1_700_000_100_000);
  });

  it('uses the web identity files when the static ones are absent', async () => {
    const d = dir('wi', { region: 'r', roleARN: 'x', token: 't' });
    at(join(d, 'region'), 1_700_000_000);
    at(join(d, 'roleARN'), 1_700_000_000);
    at(join(d, 'token'), 1_700_000_500);
    expect((await credentialsModifiedTime('S3', { SOURCE_AWS_APPLICATION_CREDENTIALS: d }, 'SOURCE_'))?.getTime()).toBe(1_700_000_500_000);
  });

  it('follows the same precedence as reading: _JSON file, then JSON in the directory', async () => {
    const p = file('aws.json', {});
    at(p, 1_600_000_000);
    const d = dir('aws', { 'c.json': '{}', accessKeyID: 'A', secretAccessKey: 'S', region: 'r' });
    at(join(d, 'c.json'), 1_650_000_000);
    expect(
      (await credentialsModifiedTime('S3', { AWS_APPLICATION_CREDENTIALS_JSON: p, AWS_APPLICATION_CREDENTIALS: d }, ''))?.getTime(),
    ).toBe(1_600_000_000_000);
    expect((await credentialsModifiedTime('S3', { AWS_APPLICATION_CREDENTIALS: d }, ''))?.getTime()).toBe(1_650_000_000_000);
  });

  it('covers ABS account and key files', async () => {
    const d = dir('az', { storageAccount: 'a', storageKey: 'k' });
    at(join(d, 'storageAccount'), 1_700_000_000);
    at(join(d, 'storageKey'), 1_700_000_042);
    expect((await credentialsModifiedTime('ABS', { AZURE_APPLICATION_CREDENTIALS: d }, ''))?.getTime()).toBe(1_700_000_042_000);
  });

  it('covers token and projectID for GCS external accounts', async () => {
    const d = dir('wif', { token: 'jwt', projectID: 'p-12345' });
    const keyFile = join(d, 'cfg.json');
    writeFileSync(keyFile, JSON.stringify(externalAccount(d)));
    at(keyFile, 1_700_000_000);
    at(join(d, 'projectID'), 1_700_000_000);
    at(join(d, 'token'), 1_700_000_900);
    expect((await credentialsModifiedTime('GCS', { GOOGLE_APPLICATION_CREDENTIALS: keyFile }, ''))?.getTime()).toBe(1_700_000_900_000);
    const sa = file('sa.json', SERVICE_ACCOUNT);
    at(sa, 1_700_000_001);
    expect((await credentialsModifiedTime('GCS', { GOOGLE_APPLICATION_CREDENTIALS: sa }, ''))?.getTime()).toBe(1_700_000_001_000);
  });

  it('is undefined when there is nothing to watch (upstream errors instead, §15.9)', async () => {
    expect(await credentialsModifiedTime('S3', {}, '')).toBeUndefined();
    expect(await credentialsModifiedTime('ABS', {}, '')).toBeUndefined();
    expect(await credentialsModifiedTime('GCS', {}, '')).toBeUndefined();
    expect(await credentialsModifiedTime('Local', { AWS_APPLICATION_CREDENTIALS: '/x' }, '')).toBeUndefined();
  });

  it('fails naming the file when a credential file is missing', async () => {
    expect(await credentialError(credentialsModifiedTime('S3', { AWS_APPLICATION_CREDENTIALS_JSON: join(root, 'gone.json') }, ''))).toMatch(
      /^AWS_APPLICATION_CREDENTIALS_JSON: cannot stat credential file .*gone\.json: no such file or directory$/,
    );
    const d = dir('half', { region: 'r', accessKeyID: 'A' });
    expect(await credentialError(credentialsModifiedTime('S3', { AWS_APPLICATION_CREDENTIALS: d }, ''))).toMatch(
      /has neither region, accessKeyID and secretAccessKey nor region, roleARN and token/,
    );
    const az = dir('az2', { storageAccount: 'a' });
    expect(await credentialError(credentialsModifiedTime('ABS', { AZURE_APPLICATION_CREDENTIALS: az }, ''))).toMatch(/az2\/storageKey/);
  });
});
