/**
 * A constant byte string that lives as long as the process, in memory of its own. `Buffer.from` takes a small
 * buffer from Node's shared pool (a 64 KiB slab on Node 24), and one constant that stays keeps the whole slab
 * alive: a module loaded after start (most are, on first use) pinned a slab of an idle sidecar each.
 * `Buffer.alloc` with a fill never uses the pool.
 */
export function constantBytes(text: string, encoding: BufferEncoding = 'utf8'): Buffer {
  return Buffer.alloc(Buffer.byteLength(text, encoding), text, encoding);
}
