import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { main } from '../../src/cli/main.js';
import { copyUpstreamStore } from './fixtures.js';

const run = promisify(execFile);

/**
 * One of the Go-written fixture stores, copied through `etcdbrctl copy` into `<dir>/encrypted`, every object
 * encrypted to a new age key (made by the reference age-keygen). Returns the store's container and the key files.
 */
export async function encryptedUpstreamStore(
  fixture: string,
  dir: string,
): Promise<{ root: string; identity: string; recipients: string }> {
  const { root: plain } = copyUpstreamStore(fixture, dir);
  const identity = join(dir, 'backup.key');
  await run('age-keygen', ['-o', identity]);
  const recipients = join(dir, 'backup.pub');
  await writeFile(recipients, (await run('age-keygen', ['-y', identity])).stdout);
  const root = join(dir, 'encrypted');
  let stderr = '';
  const io = { stdout: { write: () => true }, stderr: { write: (s: string) => (stderr += s) } };
  const args = [
    '--source-storage-provider=Local',
    `--source-store-container=${plain}`,
    '--storage-provider=Local',
    `--store-container=${root}`,
  ];
  const code = await main(['copy', ...args, `--encryption-recipients-file=${recipients}`], {}, io, { homeDir: tmpdir() });
  if (code !== 0) throw new Error(`etcdbrctl copy into an encrypted store failed (${code}): ${stderr}`);
  return { root, identity, recipients };
}
