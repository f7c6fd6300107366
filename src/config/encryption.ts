/**
 * From the `--encryption-*` flags and the environment to the age keys a store uses. Which files apply is
 * a pure decision (`encryptionFiles`); reading and parsing them is the one effect (`readEncryptionKeys`).
 */
import { readFile } from 'node:fs/promises';
import { parseIdentityFile, parseRecipientsFile, SnapStoreError, type CredentialEnv, type SnapshotEncryption } from '@etcdbrctl/snapstore';
import type { EncryptionConfig, StoreRole } from './types.js';

/** Used when the flag is not given, as `STORAGE_CONTAINER` is for `--store-container`. */
export const ENCRYPTION_RECIPIENTS_FILE_ENV = 'ENCRYPTION_RECIPIENTS_FILE';
/** Comma-separated like the flag. */
export const ENCRYPTION_IDENTITY_FILE_ENV = 'ENCRYPTION_IDENTITY_FILE';

export interface EncryptionFiles {
  recipientsFile: string | undefined;
  identityFiles: string[];
}

/**
 * The key files a store of `role` uses. A copy's source store only reads, so it gets the identities and
 * never the recipients (those are for what the copy writes).
 */
export function encryptionFiles(cfg: EncryptionConfig | undefined, env: CredentialEnv, role: StoreRole): EncryptionFiles {
  const recipients = cfg?.recipientsFile || env[ENCRYPTION_RECIPIENTS_FILE_ENV] || '';
  const identities =
    cfg !== undefined && cfg.identityFiles.length > 0 ? cfg.identityFiles : (env[ENCRYPTION_IDENTITY_FILE_ENV] ?? '').split(',');
  return {
    recipientsFile: role === 'source' || recipients === '' ? undefined : recipients,
    identityFiles: identities.map((f) => f.trim()).filter((f) => f !== ''),
  };
}

async function readKeyFile(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    throw new SnapStoreError('E_CONFIG', `cannot read the encryption ${what} file ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** Reads and parses the key files; undefined when there are none. Throws E_CONFIG naming the file. */
export async function readEncryptionKeys(files: EncryptionFiles): Promise<SnapshotEncryption | undefined> {
  if (files.recipientsFile === undefined && files.identityFiles.length === 0) return undefined;
  const recipients =
    files.recipientsFile === undefined
      ? []
      : parseRecipientsFile(await readKeyFile(files.recipientsFile, 'recipients'), files.recipientsFile);
  const identities = [];
  for (const file of files.identityFiles) identities.push(...(await parseIdentityFile(await readKeyFile(file, 'identity'), file)));
  return { recipients, identities };
}
