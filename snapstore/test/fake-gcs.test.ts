/**
 * Pins the GCS fake's own wire behaviour to the documented JSON API with plain fetch, so that the
 * provider tests that use it rest on known protocol, not on whatever the fake happens to do.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeGcsServer, parseContentRange, parseRangeHeader } from './support/fake-gcs.js';

const KiB = 1024;

describe('fake GCS JSON API', () => {
  let fake: FakeGcsServer;
  let base: string;
  const bucket = 'bkt';
  const objUrl = (name: string, q = ''): string => `${base}/storage/v1/b/${bucket}/o/${encodeURIComponent(name)}${q}`;
  const mediaUpload = (name: string, body: Buffer | string, q = ''): Promise<Response> =>
    fetch(`${base}/upload/storage/v1/b/${bucket}/o?uploadType=media&name=${encodeURIComponent(name)}${q}`, {
      method: 'POST',
      headers: { 'Content-Type': 'text/plain' },
      body,
    });

  beforeAll(async () => {
    fake = await FakeGcsServer.start({ buckets: [bucket] });
    base = fake.endpoint;
  });
  afterAll(async () => {
    await fake.stop();
  });

  it('media upload stores bytes and reports size as a string with md5Hash and crc32c', async () => {
    const res = await mediaUpload('m/hello', 'hello world');
    expect(res.status).toBe(200);
    const obj = (await res.json()) as Record<string, unknown>;
    expect(obj).toMatchObject({
      kind: 'storage#object',
      name: 'm/hello',
      bucket,
      size: '11',
      contentType: 'text/plain',
      md5Hash: 'XrY7u+Ae7tCTyyK7j1rNww==',
      crc32c: 'yZRlqg==',
      metageneration: '1',
    });
    expect(typeof obj.generation).toBe('string');
    const meta = await fetch(objUrl('m/hello'));
    expect(meta.status).toBe(200);
    expect(((await meta.json()) as { size: string }).size).toBe('11');
  });

  it('unknown objects and buckets are 404 with the JSON error body', async () => {
    const res = await fetch(objUrl('m/missing'));
    expect(res.status).toBe(404);
    const body = (await res.json()) as { error: { code: number; message: string; errors: { reason: string }[] } };
    expect(body.error.code).toBe(404);
    expect(body.error.message).toBe('No such object: bkt/m/missing');
    expect(body.error.errors[0]?.reason).toBe('notFound');
    expect((await fetch(`${base}/storage/v1/b/nope/o`)).status).toBe(404);
  });

  it('downloads with alt=media on both paths, with ranges (206), suffix ranges and 416', async () => {
    await mediaUpload('d/obj', '0123456789');
    const full = await fetch(objUrl('d/obj', '?alt=media'));
    expect(full.status).toBe(200);
    expect(full.headers.get('x-goog-hash')).toContain('md5=');
    expect(full.headers.get('x-goog-stored-content-encoding')).toBe('identity');
    expect(await full.text()).toBe('0123456789');
    const dl = await fetch(`${base}/download/storage/v1/b/${bucket}/o/${encodeURIComponent('d/obj')}?alt=media`, {
      headers: { Range: 'bytes=2-4' },
    });
    expect(dl.status).toBe(206);
    expect(dl.headers.get('content-range')).toBe('bytes 2-4/10');
    expect(await dl.text()).toBe('234');
    const open = await fetch(objUrl('d/obj', '?alt=media'), { headers: { Range: 'bytes=7-' } });
    expect(await open.text()).toBe('789');
    const suffix = await fetch(objUrl('d/obj', '?alt=media'), { headers: { Range: 'bytes=-2' } });
    expect(await suffix.text()).toBe('89');
    const beyond = await fetch(objUrl('d/obj', '?alt=media'), { headers: { Range: 'bytes=10-' } });
    expect(beyond.status).toBe(416);
    await beyond.arrayBuffer();
  });

  it('lists with prefix, delimiter and pagination', async () => {
    for (const n of ['l/a', 'l/b', 'l/c/1', 'l/c/2', 'l/d', 'other']) await (await mediaUpload(n, n)).arrayBuffer();
    const page1 = (await (await fetch(`${base}/storage/v1/b/${bucket}/o?prefix=l%2F&maxResults=2`)).json()) as {
      items: { name: string; size: string }[];
      nextPageToken?: string;
    };
    expect(page1.items.map((i) => i.name)).toEqual(['l/a', 'l/b']);
    expect(page1.nextPageToken).toBeDefined();
    const page2 = (await (
      await fetch(`${base}/storage/v1/b/${bucket}/o?prefix=l%2F&maxResults=2&pageToken=${encodeURIComponent(page1.nextPageToken ?? '')}`)
    ).json()) as { items: { name: string }[]; nextPageToken?: string };
    expect(page2.items.map((i) => i.name)).toEqual(['l/c/1', 'l/c/2']);
    const page3 = (await (
      await fetch(`${base}/storage/v1/b/${bucket}/o?prefix=l%2F&maxResults=2&pageToken=${encodeURIComponent(page2.nextPageToken ?? '')}`)
    ).json()) as { items: { name: string }[]; nextPageToken?: string };
    expect(page3.items.map((i) => i.name)).toEqual(['l/d']);
    expect(page3.nextPageToken).toBeUndefined();
    const delim = (await (await fetch(`${base}/storage/v1/b/${bucket}/o?prefix=l%2F&delimiter=%2F`)).json()) as {
      items: { name: string }[];
      prefixes: string[];
    };
    expect(delim.items.map((i) => i.name)).toEqual(['l/a', 'l/b', 'l/d']);
    expect(delim.prefixes).toEqual(['l/c/']);
    const empty = (await (await fetch(`${base}/storage/v1/b/${bucket}/o?prefix=zzz`)).json()) as Record<string, unknown>;
    expect(empty).toEqual({ kind: 'storage#objects' });
  });

  it('multipart upload takes metadata from the first part and bytes from the second', async () => {
    const boundary = 'xyzzy';
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n`),
      Buffer.from(JSON.stringify({ name: 'mp/obj', metadata: { a: '1' } })),
      Buffer.from(`\r\n--${boundary}\r\nContent-Type: application/octet-stream\r\n\r\n`),
      Buffer.from('payload\r\nwith crlf'),
      Buffer.from(`\r\n--${boundary}--`),
    ]);
    const res = await fetch(`${base}/upload/storage/v1/b/${bucket}/o?uploadType=multipart`, {
      method: 'POST',
      headers: { 'Content-Type': `multipart/related; boundary=${boundary}` },
      body,
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ name: 'mp/obj', size: '18', metadata: { a: '1' }, contentType: 'application/octet-stream' });
    expect(await (await fetch(objUrl('mp/obj', '?alt=media'))).text()).toBe('payload\r\nwith crlf');
  });

  it('resumable upload: 308 with Range per chunk, status query, object visible only when finalized', async () => {
    const start = await fetch(`${base}/upload/storage/v1/b/${bucket}/o?uploadType=resumable&name=${encodeURIComponent('r/obj')}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json; charset=UTF-8' },
      body: JSON.stringify({ metadata: { k: 'v' }, contentType: 'application/octet-stream' }),
    });
    expect(start.status).toBe(200);
    const session = start.headers.get('location') ?? '';
    expect(session).toMatch(/upload_id=/);
    const c1 = Buffer.alloc(256 * KiB, 1);
    const r1 = await fetch(session, { method: 'PUT', headers: { 'Content-Range': `bytes 0-${c1.length - 1}/*` }, body: c1 });
    expect(r1.status).toBe(308);
    expect(r1.headers.get('range')).toBe(`bytes=0-${c1.length - 1}`);
    expect((await fetch(objUrl('r/obj'))).status).toBe(404);
    expect(fake.activeSessions()).toContainEqual({ bucket, name: 'r/obj', received: c1.length });
    const q = await fetch(session, { method: 'PUT', headers: { 'Content-Range': 'bytes */*' } });
    expect(q.status).toBe(308);
    expect(q.headers.get('range')).toBe(`bytes=0-${c1.length - 1}`);
    // A resend of bytes the server already has is skipped, not appended twice.
    const tail = Buffer.from('tail');
    const again = Buffer.concat([c1.subarray(c1.length - 4), tail]);
    const r2 = await fetch(session, {
      method: 'PUT',
      headers: { 'Content-Range': `bytes ${c1.length - 4}-${c1.length + 3}/${c1.length + 4}` },
      body: again,
    });
    expect(r2.status).toBe(200);
    expect(await r2.json()).toMatchObject({ name: 'r/obj', size: String(c1.length + 4), metadata: { k: 'v' } });
    const bytes = Buffer.from(await (await fetch(objUrl('r/obj', '?alt=media'))).arrayBuffer());
    expect(bytes.equals(Buffer.concat([c1, tail]))).toBe(true);
    // Asking a finished session answers with the object.
    expect((await fetch(session, { method: 'PUT', headers: { 'Content-Range': 'bytes */*' } })).status).toBe(200);
  });

  it('resumable upload: a short non-final chunk is refused, `bytes 0-*/*` streams to the end, `*/0` finalizes empty', async () => {
    const begin = async (name: string): Promise<string> =>
      (
        await fetch(`${base}/upload/storage/v1/b/${bucket}/o?uploadType=resumable&name=${encodeURIComponent(name)}`, { method: 'POST' })
      ).headers.get('location') ?? '';
    const s1 = await begin('r/short');
    const short = await fetch(s1, { method: 'PUT', headers: { 'Content-Range': 'bytes 0-9/*' }, body: Buffer.alloc(10) });
    expect(short.status).toBe(400);
    await short.arrayBuffer();
    const s2 = await begin('r/streamed');
    const streamed = await fetch(s2, { method: 'PUT', headers: { 'Content-Range': 'bytes 0-*/*' }, body: 'abc' });
    expect(streamed.status).toBe(200);
    expect(((await streamed.json()) as { size: string }).size).toBe('3');
    const s3 = await begin('r/empty');
    const empty = await fetch(s3, { method: 'PUT', headers: { 'Content-Range': 'bytes */0' } });
    expect(empty.status).toBe(200);
    expect(((await empty.json()) as { size: string }).size).toBe('0');
  });

  it('resumable upload: DELETE cancels the session with 499 and nothing is created', async () => {
    const start = await fetch(`${base}/upload/storage/v1/b/${bucket}/o?uploadType=resumable&name=${encodeURIComponent('r/cancel')}`, {
      method: 'POST',
    });
    const session = start.headers.get('location') ?? '';
    await (
      await fetch(session, { method: 'PUT', headers: { 'Content-Range': `bytes 0-${256 * KiB - 1}/*` }, body: Buffer.alloc(256 * KiB) })
    ).arrayBuffer();
    const del = await fetch(session, { method: 'DELETE' });
    expect(del.status).toBe(499);
    const late = await fetch(session, { method: 'PUT', headers: { 'Content-Range': 'bytes */1' } });
    expect(late.status).toBe(499);
    await late.arrayBuffer();
    expect((await fetch(objUrl('r/cancel'))).status).toBe(404);
    expect(fake.activeSessions().filter((s) => s.name === 'r/cancel')).toEqual([]);
  });

  it('a final chunk whose X-Goog-Hash does not match is refused and creates nothing', async () => {
    const start = await fetch(`${base}/upload/storage/v1/b/${bucket}/o?uploadType=resumable&name=${encodeURIComponent('r/hash')}`, {
      method: 'POST',
    });
    const session = start.headers.get('location') ?? '';
    const res = await fetch(session, {
      method: 'PUT',
      headers: { 'Content-Range': 'bytes 0-2/3', 'X-Goog-Hash': 'md5=AAAAAAAAAAAAAAAAAAAAAA==' },
      body: 'abc',
    });
    expect(res.status).toBe(400);
    await res.arrayBuffer();
    expect((await fetch(objUrl('r/hash'))).status).toBe(404);
  });

  it('delete answers 204 then 404; ifGenerationMatch mismatches are 412', async () => {
    await (await mediaUpload('x/del', 'bye')).arrayBuffer();
    expect((await fetch(objUrl('x/del', '?ifGenerationMatch=1'), { method: 'DELETE' })).status).toBe(412);
    expect((await fetch(objUrl('x/del'), { method: 'DELETE' })).status).toBe(204);
    expect((await fetch(objUrl('x/del'), { method: 'DELETE' })).status).toBe(404);
    await (await mediaUpload('x/once', 'one')).arrayBuffer();
    const again = await mediaUpload('x/once', 'two', '&ifGenerationMatch=0');
    expect(again.status).toBe(412);
    await again.arrayBuffer();
  });

  it('PATCH merges custom metadata and removes keys set to null', async () => {
    await (await mediaUpload('p/obj', 'x')).arrayBuffer();
    const patch = (metadata: Record<string, string | null>): Promise<Response> =>
      fetch(objUrl('p/obj'), { method: 'PATCH', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ metadata }) });
    expect(await (await patch({ 'x-etcd-snapshot-exclude': 'true', a: 'b' })).json()).toMatchObject({
      metageneration: '2',
      metadata: { 'x-etcd-snapshot-exclude': 'true', a: 'b' },
    });
    const after = (await (await patch({ a: null })).json()) as { metadata: Record<string, string> };
    expect(after.metadata).toEqual({ 'x-etcd-snapshot-exclude': 'true' });
  });

  it('compose concatenates sources into a composite object without md5Hash', async () => {
    await (await mediaUpload('c/1', 'abc')).arrayBuffer();
    await (await mediaUpload('c/2', 'def')).arrayBuffer();
    const res = await fetch(`${objUrl('c/all')}/compose`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ sourceObjects: [{ name: 'c/1' }, { name: 'c/2' }], destination: { contentType: 'application/octet-stream' } }),
    });
    expect(res.status).toBe(200);
    const obj = (await res.json()) as Record<string, unknown>;
    expect(obj).toMatchObject({ name: 'c/all', size: '6', componentCount: 2 });
    expect(obj.md5Hash).toBeUndefined();
    expect(await (await fetch(objUrl('c/all', '?alt=media'))).text()).toBe('abcdef');
  });

  it('a bucket retention policy sets retentionExpirationTime and refuses delete and overwrite with 403', async () => {
    fake.createBucket('locked', { retentionPeriodSeconds: 3600 });
    const up = await fetch(`${base}/upload/storage/v1/b/locked/o?uploadType=media&name=k`, { method: 'POST', body: 'v' });
    const obj = (await up.json()) as { timeCreated: string; retentionExpirationTime: string };
    expect(new Date(obj.retentionExpirationTime).getTime() - new Date(obj.timeCreated).getTime()).toBe(3600_000);
    const del = await fetch(`${base}/storage/v1/b/locked/o/k`, { method: 'DELETE' });
    expect(del.status).toBe(403);
    const err = (await del.json()) as { error: { message: string } };
    expect(err.error.message).toMatch(/^Object 'locked\/k' is subject to bucket's retention policy/);
    const over = await fetch(`${base}/upload/storage/v1/b/locked/o?uploadType=media&name=k`, { method: 'POST', body: 'w' });
    expect(over.status).toBe(403);
    await over.arrayBuffer();
    const bucketRes = (await (await fetch(`${base}/storage/v1/b/locked`)).json()) as { retentionPolicy: { retentionPeriod: string } };
    expect(bucketRes.retentionPolicy.retentionPeriod).toBe('3600');
  });

  it('with requireAuth, requests without the bearer token get 401', async () => {
    const guarded = await FakeGcsServer.start({ buckets: ['b'], requireAuth: 'tok' });
    try {
      const anon = await fetch(`${guarded.endpoint}/storage/v1/b/b/o`);
      expect(anon.status).toBe(401);
      expect(((await anon.json()) as { error: { message: string } }).error.message).toMatch(/^Anonymous caller does not have/);
      const ok = await fetch(`${guarded.endpoint}/storage/v1/b/b/o`, { headers: { Authorization: 'Bearer tok' } });
      expect(ok.status).toBe(200);
      await ok.arrayBuffer();
    } finally {
      await guarded.stop();
    }
  });
});

describe('fake GCS header parsing', () => {
  it.each([
    ['bytes */*', { kind: 'status' }],
    ['bytes */10', { kind: 'status', total: 10 }],
    ['bytes 0-9/*', { kind: 'range', first: 0, last: 9 }],
    ['bytes 10-19/20', { kind: 'range', first: 10, last: 19, total: 20 }],
    ['bytes 0-*/*', { kind: 'range', first: 0 }],
    ['bytes 0--1/0', { kind: 'range', first: 0, last: -1, total: 0 }],
    ['bytes 5-2/*', undefined],
    ['items 0-1/2', undefined],
  ])('Content-Range %s', (header, want) => {
    expect(parseContentRange(header)).toEqual(want);
  });

  it.each([
    ['bytes=0-0', 10, { start: 0, end: 0 }],
    ['bytes=3-', 10, { start: 3, end: 9 }],
    ['bytes=5-100', 10, { start: 5, end: 9 }],
    ['bytes=-3', 10, { start: 7, end: 9 }],
    ['bytes=10-', 10, 'unsatisfiable'],
    ['bytes=0-', 0, 'unsatisfiable'],
    ['pages=1-2', 10, undefined],
  ] as const)('Range %s of %d bytes', (header, size, want) => {
    expect(parseRangeHeader(header, size)).toEqual(want);
  });
});
