/**
 * The S3 emulator the tests run has S3's all-or-nothing object writes (support/s3rver-atomic-put.cjs): a PUT whose
 * client goes away in the middle of the body leaves no object, as on S3. Without it s3rver listed the
 * half-written object during the upload and kept it, truncated, after (the fault soak, seed 51).
 */
import { readdir } from 'node:fs/promises';
import { connect } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../test/support/wait.js';
import { startS3rver, type S3rverInstance } from './support/s3rver.js';

describe('s3rver as the tests run it', () => {
  let s3: S3rverInstance;
  beforeAll(async () => {
    s3 = await startS3rver({ bucket: 'atomic' });
  });
  afterAll(async () => {
    await s3?.stop();
  });

  const files = async () => readdir(path.join(s3.directory, 'atomic')).catch(() => [] as string[]);

  it('keeps no object of a PUT whose client went away mid-body, and lists none while it runs', async () => {
    const { port } = new URL(s3.endpoint);
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    socket.write(`PUT /atomic/cut-short HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Length: 100000\r\n\r\n`);
    socket.write(Buffer.alloc(1000, 1));
    // The body is being written (to the temporary file beside the object) and nothing is listed yet.
    await waitFor(async () => (await files()).some((f) => f.includes('.part-')), 'the upload in progress');
    expect((await s3.rawKeys()).filter((k) => k.startsWith('cut-short'))).toEqual([]);
    socket.destroy();
    await waitFor(async () => !(await files()).some((f) => f.includes('.part-')), 'the cut-short upload cleaned up');
    expect((await s3.rawKeys()).filter((k) => k.startsWith('cut-short'))).toEqual([]);
    expect((await fetch(`${s3.endpoint}/atomic/cut-short`)).status).toBe(404);
  });

  it('stores a whole PUT as before', async () => {
    const body = Buffer.alloc(5000, 7);
    expect((await fetch(`${s3.endpoint}/atomic/whole`, { method: 'PUT', body })).status).toBe(200);
    const got = await fetch(`${s3.endpoint}/atomic/whole`);
    expect(Buffer.from(await got.arrayBuffer()).equals(body)).toBe(true);
    expect(await files()).not.toContainEqual(expect.stringContaining('.part-'));
  });
});
