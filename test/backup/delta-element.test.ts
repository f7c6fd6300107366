import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { decodeBase64, isBase64 } from '../../src/backup/base64.js';
import { decodeCanonicalElement } from '../../src/backup/delta-element.js';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { decodeElementJson, DeltaPayloadDecoder, DeltaPayloadParser } from '../../src/backup/delta-parse.js';

/** A small deterministic generator, so a failure names its seed and can be replayed. */
function random(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

function randomBytes(rnd: () => number, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(rnd() * 256);
  return b;
}

function randomEvent(rnd: () => number): DeltaEvent {
  const del = rnd() < 0.2;
  const rev = 1 + Math.floor(rnd() * (rnd() < 0.1 ? Number.MAX_SAFE_INTEGER : 1e6));
  const leases = ['0', '7668682366694035557', '-42', String(Math.floor(rnd() * 1e9))];
  return {
    type: del ? 'DELETE' : 'PUT',
    key: randomBytes(rnd, Math.floor(rnd() * 40)),
    value: del ? Buffer.alloc(0) : randomBytes(rnd, Math.floor(rnd() * (rnd() < 0.1 ? 5000 : 300))),
    createRevision: del ? 0 : Math.max(1, rev - Math.floor(rnd() * 100)),
    modRevision: rev,
    version: del ? 0 : Math.floor(rnd() * 5),
    lease: del ? '0' : leases[Math.floor(rnd() * leases.length)]!,
    time: rnd() < 0.5 ? '2026-11-25T23:24:06.123456789Z' : '2026-11-25T23:24:06Z',
  };
}

/** What each path makes of one element's text: the event, or the error's message. */
function bothPaths(text: string): { fast: DeltaEvent | undefined; general: DeltaEvent | string } {
  const buf = Buffer.from(text);
  const fast = decodeCanonicalElement(buf, 0, buf.length);
  let general: DeltaEvent | string;
  try {
    general = decodeElementJson(text, 'event 0');
  } catch (err) {
    general = (err as Error).message;
  }
  return { fast, general };
}

type ParseOptions = ConstructorParameters<typeof DeltaPayloadParser>[1];

async function parse(json: string, opts?: ParseOptions, chunkBytes = Infinity, trailer?: Buffer): Promise<DeltaEvent[]> {
  const body = Buffer.from(json);
  const payload = Buffer.concat([body, trailer ?? createHash('sha256').update(body).digest()]);
  const chunks: Buffer[] = [];
  for (let at = 0; at < payload.length; at += Math.min(chunkBytes, payload.length)) chunks.push(payload.subarray(at, at + chunkBytes));
  const events: DeltaEvent[] = [];
  const parser = new DeltaPayloadParser('test', opts);
  parser.on('data', (e: DeltaEvent) => events.push(e));
  await pipeline(Readable.from(chunks), parser);
  return events;
}

describe('base64 from bytes', () => {
  it('decodes what Buffer encodes, at every length and in the middle of a larger buffer', () => {
    const rnd = random(1);
    // Past 144 bytes Node's decoder does the work (base64.ts NATIVE_DECODE_CHARS): both sides of the switch.
    for (let n = 0; n < 400; n++) {
      const data = randomBytes(rnd, n);
      const text = Buffer.from(`"${data.toString('base64')}"`);
      expect(isBase64(text, 1, text.length - 1)).toBe(true);
      expect(decodeBase64(text, 1, text.length - 1)?.equals(data)).toBe(true);
    }
  });

  it.each([
    ['a length that is not a multiple of 4', 'YWJ'],
    ['a character outside the alphabet', 'YW-j'],
    ['URL-safe base64', 'a_8='],
    ['padding in the middle', 'YQ==YWJj'],
    ['three padding characters', 'Y==='],
    ['only padding', '===='],
    ['whitespace', 'YW Jj'],
  ])('rejects %s', (_what, text) => {
    const buf = Buffer.from(text);
    expect(isBase64(buf, 0, buf.length)).toBe(false);
    expect(decodeBase64(buf, 0, buf.length)).toBeUndefined();
  });

  // A long field goes through Node's decoder, which skips characters it does not know and stops at padding.
  const long = Buffer.alloc(300, 0xa5).toString('base64');
  it.each([
    ['a character outside the alphabet', `${long.slice(0, 100)}!${long.slice(101)}`],
    ['whitespace', `${long.slice(0, 100)} ${long.slice(101)}`],
    ['padding in the middle', `${long.slice(0, 100)}=${long.slice(101)}`],
    ['a non-ASCII byte', `${long.slice(0, 100)}\u00e9${long.slice(101)}`],
    ['a length that is not a multiple of 4', long.slice(1)],
  ])('rejects %s in a long field', (_what, text) => {
    const buf = Buffer.from(text, 'latin1');
    expect(decodeBase64(buf, 0, buf.length)).toBeUndefined();
  });

  it('reads a long URL-safe field as the general path (Buffer.from) does', () => {
    const data = Buffer.alloc(299, 0xfb);
    const urlSafe = data.toString('base64url') + '=';
    expect(urlSafe.length % 4).toBe(0);
    const buf = Buffer.from(urlSafe);
    expect(decodeBase64(buf, 0, buf.length)).toEqual(Buffer.from(urlSafe, 'base64'));
    expect(decodeBase64(buf, 0, buf.length)).toEqual(data);
  });
});

describe('delta elements: the fast path agrees with JSON.parse', () => {
  it('reads 2,000 random events as our writer (and Go) writes them exactly as JSON.parse does', () => {
    const rnd = random(7);
    let fastCount = 0;
    for (let i = 0; i < 2000; i++) {
      const ev = randomEvent(rnd);
      const { fast, general } = bothPaths(encodeDeltaEvent(ev));
      expect(general).toEqual(ev);
      // Revisions above 15 digits are left to JSON.parse; everything else takes the fast path.
      const long = [ev.createRevision, ev.modRevision, ev.version].some((n) => String(n).length > 15);
      if (long) expect(fast).toBeUndefined();
      else {
        expect(fast).toEqual(ev);
        fastCount++;
      }
    }
    expect(fastCount).toBeGreaterThan(1500);
  });

  it('never disagrees with JSON.parse on elements with one byte changed', () => {
    const rnd = random(11);
    let tried = 0;
    let fastTaken = 0;
    for (let i = 0; i < 300; i++) {
      const text = Buffer.from(encodeDeltaEvent(randomEvent(rnd)));
      for (let m = 0; m < 20; m++) {
        const mutated = Buffer.from(text);
        const at = Math.floor(rnd() * mutated.length);
        // Mostly bytes that keep the element plausible: digits, base64 letters, JSON punctuation.
        const pool = '0123456789AZaz+/=-"{}:,.\\ e';
        mutated[at] = rnd() < 0.8 ? pool.charCodeAt(Math.floor(rnd() * pool.length)) : Math.floor(rnd() * 256);
        const { fast, general } = bothPaths(mutated.toString('latin1'));
        tried++;
        if (fast === undefined) continue;
        fastTaken++;
        // Whatever the fast path accepts, JSON.parse accepts too and reads the same event.
        expect(general, `mutation of byte ${at}: ${mutated.toString('latin1')}`).toEqual(fast);
      }
    }
    expect(tried).toBe(6000);
    expect(fastTaken).toBeGreaterThan(500);
  });

  it.each([
    ['whitespace', '{ "etcdEvent":{"kv":{"key":"YQ==","mod_revision":9}},"time":"t"}'],
    ['fields in another order', '{"etcdEvent":{"kv":{"mod_revision":9,"key":"YQ=="}},"time":"t"}'],
    ['an explicit PUT type', '{"etcdEvent":{"type":0,"kv":{"key":"YQ==","mod_revision":9}},"time":"t"}'],
    ['an escape in the time', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":9}},"time":"2026\\u002d11"}'],
    ['a prev_kv', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":9},"prev_kv":{"key":"YQ=="}},"time":"t"}'],
    ['a number with an exponent', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":9e0}},"time":"t"}'],
    ['base64 without padding', '{"etcdEvent":{"kv":{"key":"YQ","mod_revision":9}},"time":"t"}'],
    ['a lease with leading zeros', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":9,"lease":007}},"time":"t"}'],
    ['no time', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":9}}}'],
    ['a non-ASCII time', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":9}},"time":"zeit·"}'],
  ])('leaves %s to JSON.parse, and the parser reads it', async (_what, text) => {
    const { fast, general } = bothPaths(text);
    expect(fast).toBeUndefined();
    expect(typeof general).toBe('object');
    expect(await parse(`[${text}]`)).toEqual([general]);
  });

  it.each([
    ['a revision with a leading zero', '{"etcdEvent":{"kv":{"key":"YQ==","mod_revision":09}},"time":"t"}', /not valid JSON/],
    ['an unknown event type', '{"etcdEvent":{"type":2,"kv":{"key":"YQ==","mod_revision":9}},"time":"t"}', /unexpected event type 2/],
    ['an event without kv', '{"etcdEvent":{},"time":"t"}', /no etcdEvent.kv/],
  ])('rejects %s with the general path’s error', async (_what, text, error) => {
    expect(bothPaths(text).fast).toBeUndefined();
    await expect(parse(`[${text}]`)).rejects.toThrow(error);
  });

  it('leaves keys and values empty when told not to decode them, and reads the rest', async () => {
    const rnd = random(3);
    const events = Array.from({ length: 50 }, () => randomEvent(rnd)).filter((e) => String(e.modRevision).length <= 15);
    const json = `[${events.map(encodeDeltaEvent).join(',')}]`;
    const full = await parse(json);
    const bare = await parse(json, { payloads: false });
    expect(full).toEqual(events);
    expect(bare).toEqual(events.map((e) => ({ ...e, key: Buffer.alloc(0), value: Buffer.alloc(0) })));
  });

  it('decodes keys only when told, and gives each value on request inside its event, wherever the chunks split', () => {
    const rnd = random(11);
    // All canonical (revisions the fast path reads), but the two spliced in.
    const events = Array.from({ length: 40 }, () => randomEvent(rnd)).filter((e) => String(e.modRevision).length <= 15);
    const texts = events.map(encodeDeltaEvent);
    // Elements the fast path leaves to JSON.parse, whose events carry their value decoded.
    texts.splice(3, 0, String.raw`{ "etcdEvent":{"kv":{"key":"YQ==","value":"Yg==","mod_revision":9}},"time":"x\"}\\ ] [ {"}`);
    texts.splice(20, 0, '{"etcdEvent":{"kv":{"mod_revision":9,"value":"Yw==","key":"YQ=="}},"time":"t"}');
    const expected = texts.map((t) => decodeElementJson(t, 'event'));
    const body = Buffer.from(`[${texts.join(',')}]`);
    const payload = Buffer.concat([body, createHash('sha256').update(body).digest()]);
    for (const size of [1, 7, 100, 1000, 1 << 16]) {
      const decoder = new DeltaPayloadDecoder('test', { values: false });
      const keys: Buffer[] = [];
      const values: Buffer[] = [];
      const take = (ev: DeltaEvent): void => {
        keys.push(ev.key);
        values.push(decoder.valueOf(ev));
      };
      for (let at = 0; at < payload.length; at += size) decoder.write(payload.subarray(at, at + size), take);
      decoder.end();
      expect(keys, `chunks of ${size}`).toEqual(expected.map((e) => e.key));
      expect(values, `chunks of ${size}`).toEqual(expected.map((e) => e.value));
    }
    // Not asked for, the value is left empty on the event.
    const decoder = new DeltaPayloadDecoder('test', { values: false });
    const seen: DeltaEvent[] = [];
    decoder.write(payload, (ev) => seen.push(ev));
    expect(seen.map((e) => e.value.toString())).toEqual(expected.map((e, i) => (i === 3 || i === 20 ? e.value.toString() : '')));
  });

  it('reads elements wherever the chunks split, canonical ones and the others mixed', async () => {
    const rnd = random(5);
    const texts = Array.from({ length: 40 }, () => encodeDeltaEvent(randomEvent(rnd)));
    texts.splice(3, 0, String.raw`{ "etcdEvent":{"kv":{"key":"YQ==","mod_revision":9}},"time":"x\"}\\ ] [ {"}`);
    texts.splice(20, 0, '{"etcdEvent":{"kv":{"mod_revision":9,"key":"YQ=="}},"time":"t"}');
    const expected = texts.map((t) => decodeElementJson(t, 'event'));
    const json = `[${texts.join(',')}]`;
    for (const size of [1, 7, 100, 1000, 1 << 16]) {
      expect(await parse(json, undefined, size)).toEqual(expected);
    }
  });

  it('leaves times empty when told, and skips the hash when it was checked before (the trailer still set apart)', async () => {
    const rnd = random(9);
    const events = Array.from({ length: 20 }, () => randomEvent(rnd)).filter((e) => String(e.modRevision).length <= 15);
    const json = `[${events.map(encodeDeltaEvent).join(',')}]`;
    expect(await parse(json, { times: false })).toEqual(events.map((e) => ({ ...e, time: '' })));
    const wrong = Buffer.alloc(32, 7);
    await expect(parse(json, {}, Infinity, wrong)).rejects.toThrow(/expected sha256/);
    expect(await parse(json, { hashChecked: true }, 50, wrong)).toEqual(events);
  });
});
