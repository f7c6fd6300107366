/**
 * The C2SP/CCTV age test vectors (vendored subset, test/fixtures/cctv-age/README.md) through our decrypting
 * stream: every vector that must decrypt does, to the exact plaintext; every broken header, stanza, MAC and
 * payload is refused with the typed error for its kind; and for payload failures, what we released before
 * refusing is exactly what the vector allows (only authenticated chunks).
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { inflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { CCTV_AGE } from '../../test/support/fixtures.js';
import { createDecryptStream, parseIdentityFile } from '../src/encryption.js';
import { isSnapStoreError, type SnapStoreErrorCode } from '../src/errors.js';
import { chunksOf } from './support/streams.js';

interface Vector {
  name: string;
  expect: string;
  payload: string | undefined;
  identities: string[];
  file: Buffer;
}

function readVector(name: string): Vector {
  const raw = readFileSync(join(CCTV_AGE, name));
  const split = raw.indexOf('\n\n');
  if (split < 0) throw new Error(`${name}: no empty line after the vector's header`);
  const fields = raw
    .subarray(0, split)
    .toString('utf8')
    .split('\n')
    .map((line) => [line.slice(0, line.indexOf(': ')), line.slice(line.indexOf(': ') + 2)] as const);
  const get = (key: string): string[] => fields.filter(([k]) => k === key).map(([, v]) => v);
  const body = raw.subarray(split + 2);
  return {
    name,
    expect: get('expect')[0] ?? '',
    payload: get('payload')[0],
    identities: get('identity'),
    file: get('compressed')[0] === 'zlib' ? inflateSync(body) : body,
  };
}

const vectors = readdirSync(CCTV_AGE).sort().map(readVector);

/** The error code each kind of expected failure maps to in our API. */
const EXPECTED_CODE: Record<string, SnapStoreErrorCode> = {
  'no match': 'E_NO_IDENTITY',
  'HMAC failure': 'E_CORRUPT',
  'header failure': 'E_CORRUPT',
  'payload failure': 'E_CORRUPT',
};

/** Decrypts `file` fed in `chunkSize` writes; returns what was released and the error, if any. */
async function decrypt(v: Vector, chunkSize: number): Promise<{ released: Buffer; error: unknown }> {
  const identities = v.identities.length === 0 ? [] : await parseIdentityFile(v.identities.join('\n'), `${v.name} identities`);
  const out: Buffer[] = [];
  let error: unknown;
  try {
    await pipeline(
      Readable.from(chunksOf(v.file, chunkSize)),
      createDecryptStream(identities, v.name),
      new Writable({
        write(chunk: Buffer, _enc, cb) {
          out.push(chunk);
          cb();
        },
      }),
    );
  } catch (err) {
    error = err;
  }
  return { released: Buffer.concat(out), error };
}

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('C2SP/CCTV age test vectors', () => {
  it('the vendored set is all there and every vector has a known expectation', () => {
    expect(vectors.length).toBe(85);
    for (const v of vectors) expect(['success', ...Object.keys(EXPECTED_CODE)], v.name).toContain(v.expect);
    expect(vectors.filter((v) => v.expect === 'success').length).toBe(18);
    expect(vectors.filter((v) => v.expect === 'payload failure').length).toBe(18);
  });

  // Whole-file writes and odd small writes: the chunk and header boundaries fall anywhere.
  for (const chunkSize of [1 << 20, 997]) {
    it.each(vectors.map((v) => [v.name, v] as const))(`%s (writes of ${chunkSize} bytes)`, async (_name, v) => {
      const { released, error } = await decrypt(v, chunkSize);
      if (v.expect === 'success') {
        expect(error).toBeUndefined();
        expect(sha256(released)).toBe(v.payload);
        return;
      }
      const code = EXPECTED_CODE[v.expect]!;
      expect(isSnapStoreError(error, code), `${v.expect}: expected ${code}, got ${String(error)}`).toBe(true);
      expect((error as Error).message).toContain(v.name);
      if (v.expect === 'payload failure') expect(sha256(released)).toBe(v.payload);
      else expect(released.length).toBe(0);
    });
  }
});
