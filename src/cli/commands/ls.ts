/**
 * `etcdbrctl ls` (ours, not upstream): lists every snapshot of a store, v1 and v2 layouts, in the store's
 * order (ascending last revision), as an aligned text table or a JSON array.
 */
import { listedObjectKey, openSnapStore } from '@etcdbrctl/snapstore';
import type { Snapshot } from '@etcdbrctl/snapstore';
import type { LsCommandConfig } from '../../config/types.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';

/** One listed snapshot, as printed (the JSON form uses these field names). */
export interface LsRow {
  kind: string;
  startRevision: number;
  lastRevision: number;
  /** RFC 3339, UTC, second precision. */
  createdOn: string;
  /** Bytes of the stored object; null when the provider's listing does not tell. */
  sizeBytes: number | null;
  /** Policy name from the suffix: gzip, lzw, zlib, zstd, none, or the unknown suffix itself. */
  compression: string;
  compressionSuffix: string;
  /** An age file (`.age` in the name): it needs an identity to be read. */
  encrypted: boolean;
  isFinal: boolean;
  isChunk: boolean;
  key: string;
}

const POLICY_BY_SUFFIX: Readonly<Record<string, string>> = { '': 'none', '.gz': 'gzip', '.Z': 'lzw', '.zlib': 'zlib', '.zst': 'zstd' };

export function toRow(snap: Snapshot): LsRow {
  return {
    kind: snap.kind,
    startRevision: snap.startRevision,
    lastRevision: snap.lastRevision,
    createdOn: snap.createdOn.toISOString().replace(/\.\d{3}Z$/, 'Z'),
    sizeBytes: snap.sizeBytes ?? null,
    compression: POLICY_BY_SUFFIX[snap.compressionSuffix] ?? snap.compressionSuffix,
    compressionSuffix: snap.compressionSuffix,
    encrypted: snap.isEncrypted === true,
    isFinal: snap.isFinal,
    isChunk: snap.isChunk,
    key: listedObjectKey(snap),
  };
}

export function formatTable(rows: readonly LsRow[]): string {
  const header = ['KIND', 'START', 'LAST', 'CREATED', 'SIZE', 'COMPRESSION', 'ENCRYPTED', 'FINAL', 'CHUNK', 'KEY'];
  const cells = rows.map((r) => [
    r.kind,
    String(r.startRevision),
    String(r.lastRevision),
    r.createdOn,
    r.sizeBytes === null ? '-' : String(r.sizeBytes),
    r.compression,
    r.encrypted ? 'age' : 'no',
    String(r.isFinal),
    String(r.isChunk),
    r.key,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] as string).length)));
  const line = (c: readonly string[]): string =>
    c
      .map((v, i) => (i === c.length - 1 ? v : v.padEnd(widths[i] as number)))
      .join('  ')
      .trimEnd() + '\n';
  return [header, ...cells].map(line).join('');
}

export async function run(config: LsCommandConfig, ctx: CommandContext): Promise<number> {
  const storeConfig = ctx.stores.primary;
  if (storeConfig === undefined) {
    ctx.io.stderr.write('Error: no store to list: give --storage-provider (Local, S3, ABS, GCS, Swift, ECS or OCS)\n');
    return 1;
  }
  let snaps: Snapshot[];
  try {
    const store = await openSnapStore(storeConfig, { readOnly: true });
    try {
      snaps = await store.list({ includeExcluded: config.all });
    } finally {
      await store.close();
    }
  } catch (err) {
    // Store errors name the store (path, bucket or endpoint) themselves.
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl ls', err);
  }
  const rows = snaps.map(toRow);
  ctx.io.stdout.write(config.output === 'json' ? JSON.stringify(rows, null, 2) + '\n' : formatTable(rows));
  return 0;
}
