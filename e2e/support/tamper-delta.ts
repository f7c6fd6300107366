/**
 * A delta snapshot altered the way no checksum notices: one event's value changed in the JSON, the sha256
 * trailer recomputed over the new JSON, and the payload compressed again with the object's own codec, written
 * over the object in a Local store. A scrub (`verify`) finds nothing wrong with it; only a comparison with
 * etcd can.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { createCompressStream, createDecompressStream, policyForSuffix, type Snapshot } from '@etcdbrctl/snapstore';

/** The file of `snap` under a Local store's container. */
async function objectFile(container: string, snap: Snapshot): Promise<string> {
  const base = snap.snapName.split('/').at(-1)!;
  const walk = async (dir: string): Promise<string | undefined> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        const found = await walk(p);
        if (found) return found;
      } else if (e.name === `${base}${snap.compressionSuffix}` || e.name === base) return p;
    }
    return undefined;
  };
  const found = await walk(container);
  if (!found) throw new Error(`no file for ${snap.snapName} under ${container}`);
  return found;
}

/**
 * Changes the value of the first put with a value at or after `revision` in `snap` (a delta of the Local store
 * at `container`) to `value`, keeping the object valid (sha256 trailer, compression); returns its revision.
 */
export async function tamperDeltaValue(container: string, snap: Snapshot, revision: number, value: Buffer): Promise<number> {
  const file = await objectFile(container, snap);
  const stored = await readFile(file);
  const payload = await buffer(Readable.from([stored]).pipe(createDecompressStream(snap.compressionSuffix, snap.snapName)));
  const json = payload.subarray(0, payload.length - 32).toString('latin1');
  const put = [...json.matchAll(/"mod_revision":(\d+),"version":\d+,"value":"([A-Za-z0-9+/=]*)"/g)].find((m) => Number(m[1]) >= revision);
  if (!put) throw new Error(`${snap.snapName} has no put with a value at or after revision ${revision}`);
  const start = put.index + put[0].indexOf('"value":"') + '"value":"'.length;
  const changed = Buffer.from(json.slice(0, start) + value.toString('base64') + json.slice(start + put[2]!.length), 'latin1');
  const sum = createHash('sha256').update(changed).digest();
  const codec = createCompressStream(policyForSuffix(snap.compressionSuffix));
  await writeFile(file, await buffer(Readable.from([Buffer.concat([changed, sum])]).pipe(codec)));
  return Number(put[1]);
}
