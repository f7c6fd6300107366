import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { gunzipSync, inflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { formatRfc3339Nano, type DeltaEvent } from '../../src/backup/delta-format.js';
import { deltaEventJsonLength, encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

const COMPAT = UPSTREAM_V023;

/** Decompressed payloads of the upstream gzip/zlib/none deltas (lzw is covered by the codec tests). */
function upstreamDeltaPayloads(): Array<{ name: string; payload: Buffer }> {
  const out: Array<{ name: string; payload: Buffer }> = [];
  for (const c of ['none', 'gzip', 'zlib', 'two-fulls-gzip', 'final-gzip', 'compacted-gzip']) {
    const dir = join(COMPAT, c, 'snapstore', 'v2');
    for (const f of readdirSync(dir).filter((n) => n.startsWith('Incr-'))) {
      const raw = readFileSync(join(dir, f));
      const payload = f.endsWith('.gz') ? gunzipSync(raw) : f.endsWith('.zlib') ? inflateSync(raw) : raw;
      out.push({ name: `${c}/${f}`, payload });
    }
  }
  return out;
}

async function parseAll(chunks: Buffer[], what = 'test'): Promise<DeltaEvent[]> {
  const events: DeltaEvent[] = [];
  const parser = new DeltaPayloadParser(what);
  parser.on('data', (e: DeltaEvent) => events.push(e));
  await pipeline(Readable.from(chunks), parser);
  return events;
}

function splitRandomly(buf: Buffer, seed: number): Buffer[] {
  const parts: Buffer[] = [];
  let x = seed;
  let i = 0;
  while (i < buf.length) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    const n = 1 + (x % 9000);
    parts.push(buf.subarray(i, i + n));
    i += n;
  }
  return parts;
}

function withHash(json: string): Buffer {
  const body = Buffer.from(json);
  return Buffer.concat([body, createHash('sha256').update(body).digest()]);
}

describe('delta payload format', () => {
  const payloads = upstreamDeltaPayloads();

  it('finds the upstream fixtures', () => {
    expect(payloads.length).toBeGreaterThanOrEqual(20);
  });

  it.each(payloads.map((p) => [p.name, p.payload] as const))('parses %s and re-encodes it byte for byte', async (name, payload) => {
    const events = await parseAll(splitRandomly(payload, name.length), name);
    expect(events.length).toBeGreaterThan(0);
    const json = `[${events.map(encodeDeltaEvent).join(',')}]`;
    expect(Buffer.from(json).equals(payload.subarray(0, payload.length - 32))).toBe(true);
    for (let i = 1; i < events.length; i++) {
      expect(events[i]!.modRevision).toBeGreaterThanOrEqual(events[i - 1]!.modRevision);
    }
  });

  it('keeps int64 lease IDs exact', async () => {
    const json =
      '[{"etcdEvent":{"kv":{"key":"YQ==","create_revision":5,"mod_revision":9,"version":2,"value":"Yg==","lease":7668682366694035557}},"time":"2026-11-21T00:03:00.91252605Z"}]';
    const [ev] = await parseAll([withHash(json)]);
    expect(ev?.lease).toBe('7668682366694035557');
    expect(encodeDeltaEvent(ev!)).toBe(json.slice(1, -1));
  });

  it('encodes deletes with type 1 and only key and mod_revision', () => {
    const ev: DeltaEvent = {
      type: 'DELETE',
      key: Buffer.from([0, 0xff, 1]),
      value: Buffer.alloc(0),
      createRevision: 0,
      modRevision: 42,
      version: 0,
      lease: '0',
      time: '2026-01-02T03:04:05Z',
    };
    expect(encodeDeltaEvent(ev)).toBe('{"etcdEvent":{"type":1,"kv":{"key":"AP8B","mod_revision":42}},"time":"2026-01-02T03:04:05Z"}');
  });

  it('parses an empty array', async () => {
    expect(await parseAll([withHash('[]')])).toEqual([]);
  });

  it('finds element ends past quotes, backslashes and brackets inside strings, wherever the chunks split', async () => {
    // Strings a JSON encoder escapes: a quote, a backslash before a quote, brackets; then a plain event.
    const tricky = '{"etcdEvent":{"kv":{"key":"a2V5","mod_revision":7,"value":"dg=="}},"time":"x\\"}\\\\ ] [ { \\"}"}';
    const plain = '{"etcdEvent":{"kv":{"key":"azI=","mod_revision":8,"value":"djI="}},"time":"t"}';
    const payload = withHash(`[${tricky},${plain}]`);
    for (const size of [1, 2, 3, 5, 7, 1 << 16]) {
      const chunks: Buffer[] = [];
      for (let at = 0; at < payload.length; at += size) chunks.push(payload.subarray(at, at + size));
      const events = await parseAll(chunks);
      expect(events.map((e) => [e.key.toString(), e.modRevision, e.time])).toEqual([
        ['key', 7, 'x"}\\ ] [ { "}'],
        ['k2', 8, 't'],
      ]);
    }
  });

  it('rejects a tampered byte, a truncated payload and a missing hash', async () => {
    const { payload, name } = payloads[0]!;
    const tampered = Buffer.from(payload);
    tampered[Math.floor(tampered.length / 2)]! ^= 0x01;
    await expect(parseAll([tampered], name)).rejects.toThrow(new RegExp(`${name}.*(sha256|JSON|unexpected)`));
    await expect(parseAll([payload.subarray(0, payload.length - 1000)], name)).rejects.toThrow(name);
    await expect(parseAll([Buffer.from('[]')], name)).rejects.toThrow(/missing hash/);
  });

  it("counts an element's length without building it, for every field combination and base64 padding", async () => {
    const upstream = (await Promise.all(payloads.map((p) => parseAll([p.payload], p.name)))).flat();
    expect(upstream.length).toBeGreaterThan(100);
    // A small LCG, so a failure names a reproducible case.
    let seed = 7;
    const next = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed % n;
    };
    const numbers = [0, 1, 9, 10, 99, 123_456, 2 ** 53 - 1];
    const generated = Array.from({ length: 2_000 }, (): DeltaEvent => ({
      type: next(2) === 0 ? 'PUT' : 'DELETE',
      key: Buffer.alloc(next(7), 0x61 + next(26)),
      value: Buffer.alloc(next(3) === 0 ? 0 : next(300), next(256)),
      createRevision: numbers[next(numbers.length)]!,
      modRevision: numbers[next(numbers.length)]!,
      version: numbers[next(numbers.length)]!,
      lease: ['0', '', '7', '-42', '7668682366694035557'][next(5)]!,
      time: ['2026-01-02T03:04:05Z', '2026-11-21T00:03:00.91252605Z', 'zeit-\u00e4-\u2603'][next(3)]!,
    }));
    for (const ev of [...upstream, ...generated]) expect(deltaEventJsonLength(ev)).toBe(Buffer.byteLength(encodeDeltaEvent(ev), 'utf8'));
    const bad: DeltaEvent = { ...generated[0]!, lease: '12x' };
    expect(() => deltaEventJsonLength(bad)).toThrow(/invalid lease ID "12x"/);
  });

  it('formats times like Go RFC3339Nano', () => {
    expect(formatRfc3339Nano(1_795_219_380_912_526_050n)).toBe('2026-11-21T00:03:00.91252605Z');
    expect(formatRfc3339Nano(1_795_219_380_000_000_000n)).toBe('2026-11-21T00:03:00Z');
    expect(formatRfc3339Nano(1_795_219_380_100_000_000n)).toBe('2026-11-21T00:03:00.1Z');
  });
});
