import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../src/logger.js';
import { MemoryParts } from '../src/providers/memory-parts.js';
import { uploadInParts, type MultipartAdapter, type MultipartUploadOptions } from '../src/providers/multipart-upload.js';
import { PartBufferPool } from '../src/providers/part-buffers.js';
import { UploadFailedError } from '../src/providers/upload-failed.js';
import { cutParts, type PartStorage } from '../src/providers/upload-parts.js';

/** A pool whose buffers are recorded as they are taken, filled with 0xee so a stale byte would show. */
function recordingPool(size: number, capacity: number): { pool: PartBufferPool; taken: Buffer[] } {
  const taken: Buffer[] = [];
  const pool = new PartBufferPool(size, capacity);
  const take = pool.take.bind(pool);
  pool.take = () => {
    const b = take().fill(0xee);
    taken.push(b);
    return b;
  };
  return { pool, taken };
}

async function cut(input: Readable, size: number, storage: PartStorage<Buffer>, whole: boolean): Promise<string[]> {
  const out: string[] = [];
  for await (const item of cutParts(input, size, storage, whole)) {
    out.push(item.part ? item.part.body.toString() : `whole:${item.whole.bytes.toString()}`);
    await item.part?.release();
    item.whole?.release();
  }
  return out;
}

describe('cutParts', () => {
  it('cuts a stream into parts of exactly the part size, the last one shorter, none for no input', async () => {
    const { pool } = recordingPool(4, 2);
    const src = Readable.from([Buffer.from('abc'), Buffer.from('defghijklm'), Buffer.alloc(0), Buffer.from('no')]);
    expect(await cut(src, 4, new MemoryParts(pool), false)).toEqual(['abcd', 'efgh', 'ijkl', 'mno']);
    expect(await cut(Readable.from([]), 4, new MemoryParts(pool), false)).toEqual([]);
  });

  it('fills one buffer per part and takes none beyond the last byte; the short last part is a view of its buffer', async () => {
    const { pool, taken } = recordingPool(4, 3);
    const seen: Buffer[] = [];
    for await (const item of cutParts(Readable.from([Buffer.from('abcdefgh')]), 4, new MemoryParts(pool), false)) {
      seen.push(item.part?.body as Buffer);
    }
    expect(seen.map(String)).toEqual(['abcd', 'efgh']);
    expect(taken).toHaveLength(2);

    const second = recordingPool(4, 3);
    const last: Buffer[] = [];
    for await (const item of cutParts(Readable.from([Buffer.from('abcdef')]), 4, new MemoryParts(second.pool), false)) {
      last.push(item.part?.body as Buffer);
    }
    expect(last.map(String)).toEqual(['abcd', 'ef']);
    expect(second.taken).toHaveLength(2);
    expect(last[1]?.buffer).toBe(second.taken[1]?.buffer);
  });

  it('hands an input that ends within the first part (an empty one too) on whole, a full first part as a part', async () => {
    const { pool } = recordingPool(4, 2);
    expect(await cut(Readable.from([Buffer.from('abc')]), 4, new MemoryParts(pool), true)).toEqual(['whole:abc']);
    expect(await cut(Readable.from([]), 4, new MemoryParts(pool), true)).toEqual(['whole:']);
    expect(await cut(Readable.from([Buffer.from('abcd')]), 4, new MemoryParts(pool), true)).toEqual(['abcd']);
  });
});

/** A store in memory behind the adapter interface, recording every call. */
function fakeStore(opts: { failPart?: (n: number, attempt: number) => Error | undefined; hold?: Promise<void>; putWhole?: boolean } = {}) {
  const calls: string[] = [];
  const attempts = new Map<number, number>();
  let inFlight = 0;
  let maxInFlight = 0;
  let committed: Buffer | undefined;
  const stored = new Map<number, Buffer>();
  const adapter: MultipartAdapter<Buffer, string, number> = {
    begin: () => {
      calls.push('begin');
      return Promise.resolve('up-1');
    },
    async putPart(_id, n, body, signal) {
      const attempt = (attempts.get(n) ?? 0) + 1;
      attempts.set(n, attempt);
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      try {
        if (opts.hold) await opts.hold;
        if (signal.aborted) throw new UploadFailedError('aborted', signal.reason);
        const failure = opts.failPart?.(n, attempt);
        if (failure !== undefined) throw failure;
        stored.set(n, Buffer.from(body));
        calls.push(`part ${n}`);
        return n;
      } finally {
        inFlight--;
      }
    },
    commit(_id, receipts) {
      calls.push(`commit ${receipts.join(',')}`);
      committed = Buffer.concat(receipts.map((n) => stored.get(n) as Buffer));
      return Promise.resolve();
    },
    discard(id, started) {
      calls.push(`discard ${id} ${started}`);
      return Promise.resolve();
    },
    retryable: (err) => (err as { transient?: boolean }).transient === true,
  };
  if (opts.putWhole !== false) {
    adapter.putWhole = (bytes) => {
      calls.push(`whole ${bytes.length}`);
      committed = Buffer.from(bytes);
      return Promise.resolve();
    };
  }
  return {
    adapter,
    calls,
    get committed() {
      return committed;
    },
    get maxInFlight() {
      return maxInFlight;
    },
  };
}

const options = (over: Partial<MultipartUploadOptions> = {}): MultipartUploadOptions => ({
  partSize: 4,
  concurrency: 2,
  retry: { retries: 2, baseDelayMs: 1 },
  logger: silentLogger,
  where: 'test',
  ...over,
});

const memory = (capacity = 3): MemoryParts => new MemoryParts(new PartBufferPool(4, capacity));

describe('uploadInParts', () => {
  it('sends the parts, at most `concurrency` at once, and commits them in order', async () => {
    const store = fakeStore();
    const data = Buffer.from('abcdefghijklmnopq');
    const r = await uploadInParts(Readable.from([data]), store.adapter, memory(), options());
    expect(r).toEqual({ bytes: 17, parts: 5, retries: 0 });
    expect(store.calls[0]).toBe('begin');
    expect(store.calls.at(-1)).toBe('commit 1,2,3,4,5');
    expect(store.committed).toEqual(data);
    expect(store.maxInFlight).toBeLessThanOrEqual(2);
  });

  it('fills a part buffer only while a request slot is free: one buffer per slot at most', async () => {
    let open: () => void = () => undefined;
    const store = fakeStore({ hold: new Promise<void>((r) => (open = r)) });
    const pool = new PartBufferPool(4, 3);
    let read = 0;
    const input = new Readable({
      read() {
        read += 4;
        this.push(read > 40 ? null : Buffer.alloc(4, read));
      },
    });
    const saving = uploadInParts(input, store.adapter, new MemoryParts(pool), options({ concurrency: 2 }));
    await new Promise((r) => setTimeout(r, 50));
    // Two parts held in flight and no third one filled, beyond what the stream itself buffers (16 KiB).
    expect(pool.allocated).toBe(2);
    open();
    expect(await saving).toMatchObject({ bytes: 40, parts: 10 });
    expect(pool.allocated).toBe(2);
  });

  it('stores an input within the first part whole; without putWhole it is a one-part upload, and no input an empty commit', async () => {
    const store = fakeStore();
    expect(await uploadInParts(Readable.from([Buffer.from('abc')]), store.adapter, memory(), options())).toEqual({
      bytes: 3,
      parts: 0,
      retries: 0,
    });
    expect(store.calls).toEqual(['whole 3']);

    const blocks = fakeStore({ putWhole: false });
    await uploadInParts(Readable.from([Buffer.from('abc')]), blocks.adapter, memory(), options());
    expect(blocks.calls).toEqual(['begin', 'part 1', 'commit 1']);
    const none = fakeStore({ putWhole: false });
    await uploadInParts(Readable.from([]), none.adapter, memory(), options());
    expect(none.calls).toEqual(['begin', 'commit ']);
  });

  it('retries what the adapter calls retryable, and fails at once on the rest: the first failure wins and is discarded', async () => {
    const transient = fakeStore({
      failPart: (n, attempt) => (n === 2 && attempt === 1 ? Object.assign(new Error('busy'), { transient: true }) : undefined),
    });
    const r = await uploadInParts(Readable.from([Buffer.from('abcdefghij')]), transient.adapter, memory(), options());
    expect(r).toMatchObject({ parts: 3, retries: 1 });

    const denied = new Error('denied');
    const final = fakeStore({ failPart: (n) => (n === 2 ? denied : undefined) });
    const input = Readable.from([Buffer.from('abcdefghijklmnop')]);
    const err = await uploadInParts(input, final.adapter, memory(), options()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UploadFailedError);
    expect(err).toMatchObject({ origin: 'store', cause: denied });
    expect(final.calls.some((c) => c.startsWith('commit'))).toBe(false);
    expect(final.calls.at(-1)).toMatch(/^discard up-1 [2-4]$/);
    expect(input.destroyed).toBe(true);
  });

  it('an input error and an abort are reported as such, and nothing is committed', async () => {
    const store = fakeStore();
    const failing = new Readable({
      read() {
        this.push(Buffer.from('abcdefgh'));
        this.destroy(new Error('input broke'));
      },
    });
    const err = await uploadInParts(failing, store.adapter, memory(), options()).catch((e: unknown) => e);
    expect(err).toMatchObject({ origin: 'input', cause: { message: 'input broke' } });

    let open: () => void = () => undefined;
    const held = fakeStore({ hold: new Promise<void>((r) => (open = r)) });
    const controller = new AbortController();
    const saving = uploadInParts(Readable.from([Buffer.alloc(40)]), held.adapter, memory(), options({ signal: controller.signal }));
    controller.abort();
    open();
    await expect(saving).rejects.toMatchObject({ origin: 'aborted' });
    expect(held.calls.some((c) => c.startsWith('commit'))).toBe(false);
  });

  it('on a failure gives the requests in flight drainMs to finish, then cancels them and cleans up', async () => {
    const cancelled: number[] = [];
    const calls: string[] = [];
    const adapter: MultipartAdapter<Buffer, string, number> = {
      begin: () => Promise.resolve('up'),
      putPart: (_id, n, _body, signal) =>
        new Promise<number>((_resolve, reject) => {
          if (n === 1) return void setTimeout(() => reject(new Error('refused')), 20);
          signal.addEventListener('abort', () => {
            cancelled.push(n);
            reject(new Error('cancelled'));
          });
        }),
      commit: () => Promise.resolve(),
      discard: (id, started) => {
        calls.push(`discard ${id} ${started} after ${cancelled.length} cancelled`);
        return Promise.resolve();
      },
      retryable: () => false,
    };
    const t0 = Date.now();
    const saving = uploadInParts(Readable.from([Buffer.alloc(12)]), adapter, memory(), options({ concurrency: 3, drainMs: 300 }));
    await expect(saving).rejects.toMatchObject({ origin: 'store', cause: { message: 'refused' } });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(280);
    expect(cancelled.sort()).toEqual([2, 3]);
    expect(calls).toEqual(['discard up 3 after 2 cancelled']);
  });

  it('fails an object that needs more than maxParts parts, before sending the one too many', async () => {
    const store = fakeStore();
    const err = await uploadInParts(Readable.from([Buffer.alloc(13)]), store.adapter, memory(), options({ maxParts: 3 })).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ origin: 'store', cause: { code: 'E_TOO_LARGE' } });
    expect(store.calls.filter((c) => c.startsWith('part'))).toHaveLength(3);
  });
});
