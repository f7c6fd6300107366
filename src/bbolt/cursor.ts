/**
 * An ordered cursor over one bucket, reading pages on demand. Like bbolt's Cursor it keeps the path from the
 * root to the current leaf, so `next`/`prev` touch only the pages they must, and `last` walks the
 * right-most path (a handful of page reads however large the bucket is). Empty leaves, which bbolt can leave
 * behind after deletes, are stepped over.
 */
import { BoltError, element, isBranch, isLeaf } from './db.js';
import type { BoltDB, Bucket, Page } from './db.js';
import { LEAF_FLAG_BUCKET } from './format.js';

export interface CursorEntry {
  key: Buffer;
  /** The value; for a sub-bucket entry, the raw bucket header (and inline page). */
  value: Buffer;
  isBucket: boolean;
}

interface Frame {
  page: Page;
  index: number;
}

export class Cursor {
  private stack: Frame[] = [];

  constructor(
    private readonly db: BoltDB,
    private readonly bucket: Bucket,
  ) {}

  private async root(): Promise<Page> {
    return this.bucket.inline ?? (await this.db.treePage(this.bucket.root));
  }

  async first(): Promise<CursorEntry | undefined> {
    this.stack = [{ page: await this.root(), index: 0 }];
    await this.descend('first');
    if (this.top().page.count === 0) return this.next();
    return this.current();
  }

  async last(): Promise<CursorEntry | undefined> {
    const root = await this.root();
    this.stack = [{ page: root, index: root.count - 1 }];
    await this.descend('last');
    if (this.top().page.count === 0) return this.prev();
    return this.current();
  }

  async next(): Promise<CursorEntry | undefined> {
    for (;;) {
      let i = this.stack.length - 1;
      for (; i >= 0; i--) {
        const f = this.stack[i]!;
        if (f.index < f.page.count - 1) {
          f.index++;
          break;
        }
      }
      if (i < 0) {
        this.stack = [];
        return undefined;
      }
      this.stack.length = i + 1;
      await this.descend('first');
      if (this.top().page.count > 0) return this.current();
    }
  }

  async prev(): Promise<CursorEntry | undefined> {
    for (;;) {
      let i = this.stack.length - 1;
      for (; i >= 0; i--) {
        const f = this.stack[i]!;
        if (f.index > 0) {
          f.index--;
          break;
        }
      }
      if (i < 0) {
        this.stack = [];
        return undefined;
      }
      this.stack.length = i + 1;
      await this.descend('last');
      if (this.top().page.count > 0) return this.current();
    }
  }

  /** All entries in key order. */
  async *[Symbol.asyncIterator](): AsyncGenerator<CursorEntry> {
    for (let e = await this.first(); e; e = await this.next()) yield e;
  }

  private top(): Frame {
    return this.stack[this.stack.length - 1]!;
  }

  /** From the top frame down to a leaf, along the first or last child at each level. */
  private async descend(edge: 'first' | 'last'): Promise<void> {
    for (;;) {
      const f = this.top();
      if (isLeaf(f.page)) return;
      if (!isBranch(f.page) || f.page.count === 0) {
        throw new BoltError('E_BOLT_CORRUPT', `page ${f.page.id}: not a usable branch or leaf page`, f.page.id);
      }
      const child = await this.db.childPage(f.page, f.index);
      this.stack.push({ page: child, index: edge === 'first' ? 0 : child.count - 1 });
    }
  }

  private current(): CursorEntry {
    const f = this.top();
    const e = element(f.page, f.index);
    return { key: e.key, value: e.value, isBucket: (e.flags & LEAF_FLAG_BUCKET) !== 0 };
  }
}
