/**
 * Snapshot records, their names and keys and their JSON, exactly as etcd-backup-restore writes and parses
 * them (upstream `pkg/types/snapstore.go`). Their order and the selections made from a listing are in
 * snapshot-order.ts.
 */
import path from 'node:path';
import { SnapStoreError } from './errors.js';
import { formatGoTime, parseGoTime, unixSeconds } from './go-time.js';
import type { Logger } from './logger.js';

export type SnapshotKind = 'Full' | 'Incr';

/** Compression suffixes that appear in names. '' = uncompressed. `.zst` is ours (a difference). */
export type CompressionSuffix = '' | '.gz' | '.Z' | '.zlib' | '.zst';

export interface Snapshot {
  kind: SnapshotKind;
  /** 0 for full snapshots. Revisions are int64 upstream; we require them to be safe integers. */
  startRevision: number;
  lastRevision: number;
  /** Second precision when parsed from a name. */
  createdOn: Date;
  /** '' for v2 (flat) keys, `Backup-<unix>` for v1 keys. */
  snapDir: string;
  /** e.g. `Incr-00001235-00001300-1700000100.gz` (with `.final` when final; chunk number excluded). */
  snapName: string;
  /** For listed snapshots: everything up to and including `v1/` or `v2/`; '' for new snapshots. */
  prefix: string;
  compressionSuffix: string;
  /** The object is an age file (`.age` after the compression suffix); undefined means false. Ours, not upstream's. */
  isEncrypted?: boolean;
  isChunk: boolean;
  isFinal: boolean;
  /** Set by providers with retention policies; undefined = deletable any time. */
  immutabilityExpiryTime?: Date;
  /** S3 object-lock version of the object, when listed from a versioned bucket. */
  versionId?: string;
  /** Size in bytes of the stored object, when the provider's listing tells it (not in upstream JSON). */
  sizeBytes?: number;
  /** For chunk objects: the chunk number parsed from the key. */
  chunkNumber?: number;
}

// ---------------------------------------------------------------------------------------------------
// Names

/** Appended after the compression suffix of a final full snapshot (upstream `FinalSuffix`). */
export const FINAL_SUFFIX = '.final';

/** After the compression suffix of an age-encrypted object, before `.final` (ours; see encryption.ts). */
export const ENCRYPTED_SUFFIX = '.age';

/** The compression suffixes we can decode. Parsing keeps any other suffix; the codec rejects it later. */
export const KNOWN_COMPRESSION_SUFFIXES: readonly CompressionSuffix[] = ['', '.gz', '.Z', '.zlib', '.zst'];

export function isKnownCompressionSuffix(suffix: string): suffix is CompressionSuffix {
  return (KNOWN_COMPRESSION_SUFFIXES as readonly string[]).includes(suffix);
}

/** The fields a snapshot name is made of. */
export type SnapshotNameFields = Pick<
  Snapshot,
  'kind' | 'startRevision' | 'lastRevision' | 'createdOn' | 'compressionSuffix' | 'isFinal' | 'isEncrypted'
>;

/** Go's `%08d`: at least 8 digits, never truncated. */
function pad8(n: number): string {
  return String(n).padStart(8, '0');
}

/** Go's `%010d` for chunk numbers. */
function pad10(n: number): string {
  return String(n).padStart(10, '0');
}

/**
 * `<Kind>-<start %08d>-<last %08d>-<unix seconds><compression suffix>[.age][.final]` (upstream
 * GenerateSnapshotName, plus our `.age` for encrypted objects).
 */
export function generateSnapshotName(s: SnapshotNameFields): string {
  const final = s.isFinal ? FINAL_SUFFIX : '';
  const encrypted = s.isEncrypted === true ? ENCRYPTED_SUFFIX : '';
  return `${s.kind}-${pad8(s.startRevision)}-${pad8(s.lastRevision)}-${unixSeconds(s.createdOn)}${s.compressionSuffix}${encrypted}${final}`;
}

export interface NewSnapshotOptions {
  kind: SnapshotKind;
  startRevision: number;
  lastRevision: number;
  createdOn: Date;
  compressionSuffix?: CompressionSuffix;
  isFinal?: boolean;
  /** Stored as an age file (name gets `.age`). */
  encrypted?: boolean;
}

/**
 * A snapshot record for a new object (v2 layout: no snapDir, no prefix). Throws E_BAD_NAME when the
 * fields cannot form a name that parses back to the same values.
 */
export function newSnapshot(opts: NewSnapshotOptions): Snapshot {
  const { kind, startRevision, lastRevision, createdOn } = opts;
  const compressionSuffix = opts.compressionSuffix ?? '';
  const isFinal = opts.isFinal ?? false;
  const bad = (reason: string): SnapStoreError => new SnapStoreError('E_BAD_NAME', `cannot create a snapshot record: ${reason}`);
  if (kind !== 'Full' && kind !== 'Incr') throw bad(`unknown snapshot kind ${JSON.stringify(kind)}`);
  for (const [label, rev] of [
    ['start revision', startRevision],
    ['last revision', lastRevision],
  ] as const) {
    if (!Number.isSafeInteger(rev) || rev < 0) {
      throw bad(`${label} ${String(rev)} is not a non-negative safe integer`);
    }
  }
  if (startRevision > lastRevision) {
    throw bad(`start revision ${startRevision} is greater than last revision ${lastRevision}`);
  }
  if (kind === 'Full' && startRevision !== 0) {
    throw bad(`a full snapshot starts at revision 0, not ${startRevision}`);
  }
  // A negative unix time would put a '-' into the name, which no parser can split again.
  if (!(createdOn instanceof Date) || Number.isNaN(createdOn.getTime()) || createdOn.getTime() < 0) {
    throw bad(`creation time ${String(createdOn)} is not a valid time after 1970-01-01`);
  }
  if (!isKnownCompressionSuffix(compressionSuffix)) {
    throw bad(`unknown compression suffix ${JSON.stringify(compressionSuffix)}`);
  }
  const snap: Snapshot = {
    kind,
    startRevision,
    lastRevision,
    createdOn: new Date(createdOn.getTime()),
    snapDir: '',
    snapName: '',
    prefix: '',
    compressionSuffix,
    isChunk: false,
    isFinal,
  };
  // Only set when true, so plain records stay exactly what they were before encryption existed.
  if (opts.encrypted === true) snap.isEncrypted = true;
  snap.snapName = generateSnapshotName(snap);
  return snap;
}

/**
 * Finds the layout element of a key: the last path element that is exactly `v1` or `v2` and is
 * followed by more path. Upstream takes the last *substring* `v1/` (else `v2/`), which misreads keys
 * whose prefix has an element ending in `v1`/`v2` (e.g. `etcd-v1/v2/...`) or a `v1` element above
 * `v2`; for every key upstream itself writes the two agree.
 */
function findVersionElement(key: string): { index: number; version: 'v1' | 'v2' } | undefined {
  for (let i = key.length - 3; i >= 0; i--) {
    if ((i === 0 || key[i - 1] === '/') && (key.startsWith('v1/', i) || key.startsWith('v2/', i))) {
      return { index: i, version: key.startsWith('v1/', i) ? 'v1' : 'v2' };
    }
  }
  return undefined;
}

const DIGITS = /^[0-9]+$/;

/** Unix seconds that a JS Date can hold (±8.64e15 ms). */
const MAX_UNIX_SECONDS = 8_640_000_000_000;

/**
 * Parses an object key into a snapshot record (upstream `ParseSnapshot`, `pkg/types/snapstore.go`). Throws
 * SnapStoreError('E_BAD_NAME') naming the key and the reason.
 *
 * Layouts: `<prefix>/v2/<name>`, `<prefix>/v2/<name>/<chunk %010d>`, `<prefix>/v1/<dir>/<name>`,
 * `<prefix>/v1/<dir>/<name>/<chunk %010d>`. For chunks, `snapName` is the parent's name and the
 * number is in `chunkNumber`.
 *
 * Stricter than upstream, on purpose: revisions, times and chunk numbers must be plain digits (Go's
 * ParseInt also takes a sign), revisions must be safe integers, chunk numbers must be written as
 * `%010d` (so the key can be rebuilt exactly), and empty path elements or a third path element under
 * `v2/` are rejected. The compression suffix is kept as written even when we cannot decode it
 * (as upstream); the codec refuses such a snapshot when it is fetched.
 */
export function parseSnapshotKey(key: string): Snapshot {
  const fail = (reason: string): never => {
    throw new SnapStoreError('E_BAD_NAME', `invalid snapshot key ${JSON.stringify(key)}: ${reason}`);
  };
  const found = findVersionElement(key);
  if (found === undefined) return fail('it does not contain a v1/ or v2/ path element');
  const prefix = key.slice(0, found.index + 3);
  const tokens = key.slice(found.index + 3).split('/');
  if (tokens.some((t) => t === '')) return fail('empty path element');

  let snapDir = '';
  let snapName: string;
  let chunkToken: string | undefined;
  if (found.version === 'v1') {
    if (tokens.length < 2 || tokens.length > 3) {
      return fail(`expected v1/<dir>/<name>[/<chunk>], got ${tokens.length} path element(s) after v1/`);
    }
    snapDir = tokens[0] as string;
    snapName = tokens[1] as string;
    chunkToken = tokens[2];
  } else {
    if (tokens.length > 2) {
      return fail(`expected v2/<name>[/<chunk>], got ${tokens.length} path elements after v2/`);
    }
    snapName = tokens[0] as string;
    chunkToken = tokens[1];
  }

  const parts = snapName.split('-');
  if (parts.length !== 4) return fail(`snapshot name ${JSON.stringify(snapName)} does not have 4 '-'-separated parts`);
  const [kindToken, startToken, lastToken, timeToken] = parts as [string, string, string, string];
  if (kindToken !== 'Full' && kindToken !== 'Incr') return fail(`unknown snapshot kind ${JSON.stringify(kindToken)}`);
  const parseRevision = (label: string, token: string): number => {
    if (!DIGITS.test(token)) return fail(`invalid ${label} ${JSON.stringify(token)}`);
    const n = Number(token);
    if (!Number.isSafeInteger(n)) {
      return fail(`${label} ${token} is above ${Number.MAX_SAFE_INTEGER}, the largest revision supported`);
    }
    return n;
  };
  const startRevision = parseRevision('start revision', startToken);
  const lastRevision = parseRevision('last revision', lastToken);
  if (startRevision > lastRevision) {
    return fail(`last revision (${lastToken}) should be at least start revision (${startToken})`);
  }

  // Upstream's suffix rule: the 2nd dot-part is the compression suffix unless it is `final`; the
  // snapshot is final when the last dot-part is `final`. Ours on top: `.age` right after the compression
  // suffix (or in its place when uncompressed) marks an encrypted object and is no compression suffix.
  const dotParts = timeToken.split('.');
  let compressionSuffix = '';
  let isFinal = false;
  let isEncrypted = false;
  if (dotParts.length >= 2) {
    let next = 1;
    if (`.${dotParts[1]}` !== FINAL_SUFFIX && `.${dotParts[1]}` !== ENCRYPTED_SUFFIX) {
      compressionSuffix = `.${dotParts[1]}`;
      next = 2;
    }
    if (`.${dotParts[next] ?? ''}` === ENCRYPTED_SUFFIX) isEncrypted = true;
    if (`.${dotParts[dotParts.length - 1]}` === FINAL_SUFFIX) isFinal = true;
  }
  const secondsToken = dotParts[0] as string;
  if (!DIGITS.test(secondsToken)) return fail(`invalid creation time ${JSON.stringify(timeToken)}`);
  const seconds = Number(secondsToken);
  if (seconds > MAX_UNIX_SECONDS) return fail(`creation time ${secondsToken} is out of range`);

  const snap: Snapshot = {
    kind: kindToken,
    startRevision,
    lastRevision,
    createdOn: new Date(seconds * 1000),
    snapDir,
    snapName,
    prefix,
    compressionSuffix,
    isChunk: chunkToken !== undefined,
    isFinal,
  };
  if (isEncrypted) snap.isEncrypted = true;
  if (chunkToken !== undefined) {
    const n = DIGITS.test(chunkToken) ? Number(chunkToken) : NaN;
    if (!Number.isSafeInteger(n) || pad10(n) !== chunkToken) {
      return fail(`chunk number ${JSON.stringify(chunkToken)} is not a %010d number`);
    }
    snap.chunkNumber = n;
  }
  return snap;
}

/** For listings: a key that does not parse is logged and skipped, never fatal (upstream behaviour). */
export function tryParseSnapshotKey(key: string, logger: Logger): Snapshot | undefined {
  try {
    return parseSnapshotKey(key);
  } catch (err) {
    logger.warn({ key, reason: err instanceof Error ? err.message : String(err) }, 'Invalid snapshot found. Ignoring it');
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------------
// Keys

function chunkPart(snap: Snapshot): string {
  return snap.isChunk ? `/${pad10(snap.chunkNumber ?? 0)}` : '';
}

/** True when a listed snapshot came from the legacy `v1/` layout. */
function isV1Prefix(prefix: string): boolean {
  return /(^|\/)v1\/?$/.test(prefix);
}

/**
 * Upstream adaptPrefix: a v1 snapshot saved into a v2 store goes to the sibling `v1` (copying keeps
 * the layout, so `snapDir` still makes sense). Upstream swaps the first substring `/v2`; we swap the
 * last path element that is exactly `v2`, which is the same for every effective prefix
 * (`path.Join(<store-prefix>, "v2")`) and also works for a bare `v2`.
 */
function adaptPrefix(storePrefix: string, snap: Snapshot): string {
  if (!isV1Prefix(snap.prefix)) return storePrefix;
  const elements = storePrefix.split('/');
  const i = elements.lastIndexOf('v2');
  if (i < 0) return storePrefix;
  elements[i] = 'v1';
  return elements.join('/');
}

/** The key a snapshot is saved under in a store whose effective prefix is `storePrefix`. */
export function objectKey(storePrefix: string, snap: Snapshot): string {
  return path.posix.join(adaptPrefix(storePrefix, snap), snap.snapDir, snap.snapName) + chunkPart(snap);
}

/** The key of a listed snapshot (fetch and delete use the prefix it was listed under). */
export function listedObjectKey(snap: Snapshot): string {
  return path.posix.join(snap.prefix, snap.snapDir, snap.snapName) + chunkPart(snap);
}

/**
 * What providers list under: the parent of the last element of the effective prefix (its `v2`), so
 * that `v1/` objects are found too. Ends with '/' (or is '' for a bare `v2`): upstream lists with the
 * raw parent string, so `etcd-main` also matched `etcd-main2/...` (docs/design-decisions.md, upstream quirks); we deliberately don't.
 */
export function listingPrefix(storePrefix: string): string {
  const trimmed = storePrefix.replace(/\/+$/, '');
  const i = trimmed.lastIndexOf('/');
  return i < 0 ? '' : trimmed.slice(0, i + 1);
}

/** A copy with `.final` appended to or stripped from the name (upstream SetFinal). */
export function setFinal(snap: Snapshot, final: boolean): Snapshot {
  const hasSuffix = snap.snapName.endsWith(FINAL_SUFFIX);
  let snapName = snap.snapName;
  if (final && !hasSuffix) snapName += FINAL_SUFFIX;
  if (!final && hasSuffix) snapName = snapName.slice(0, -FINAL_SUFFIX.length);
  return { ...snap, snapName, isFinal: final };
}

/**
 * A copy named as the same snapshot stored encrypted (`.age` after the compression suffix) or plain; for
 * copies that re-encrypt or decrypt. `.final` stays last.
 */
export function setEncrypted(snap: Snapshot, encrypted: boolean): Snapshot {
  if ((snap.isEncrypted === true) === encrypted) return { ...snap };
  const final = snap.snapName.endsWith(FINAL_SUFFIX) ? FINAL_SUFFIX : '';
  let stem = final === '' ? snap.snapName : snap.snapName.slice(0, -FINAL_SUFFIX.length);
  if (stem.endsWith(ENCRYPTED_SUFFIX)) stem = stem.slice(0, -ENCRYPTED_SUFFIX.length);
  const out: Snapshot = { ...snap, snapName: `${stem}${encrypted ? ENCRYPTED_SUFFIX : ''}${final}` };
  if (encrypted) out.isEncrypted = true;
  else delete out.isEncrypted;
  return out;
}

/** Upstream IsDeletable: no immutability expiry, or `now` is past it. */
export function isDeletable(snap: Snapshot, now: Date): boolean {
  return snap.immutabilityExpiryTime === undefined || now.getTime() > snap.immutabilityExpiryTime.getTime();
}

// ---------------------------------------------------------------------------------------------------
// JSON (upstream `brtypes.Snapshot` as served by `/snapshot/latest` and the snapshot endpoints)

/** Go's zero `time.Time` as encoding/json writes it. */
export const GO_ZERO_TIME = '0001-01-01T00:00:00Z';

/** Upstream's JSON shape, keys in the order of the Go struct fields (HEAD). */
export interface SnapshotJSON {
  createdOn: string;
  /** Sic: upstream's json tag has this typo. */
  immutabilityExpriyTime: string;
  versionID: string | null;
  kind: SnapshotKind;
  snapDir: string;
  /** For chunks, upstream's name includes `/<chunk %010d>`. */
  snapName: string;
  prefix: string;
  compressionSuffix: string;
  startRevision: number;
  lastRevision: number;
  isChunk: boolean;
  isFinal: boolean;
}

export function snapshotToJSON(snap: Snapshot): SnapshotJSON {
  return {
    createdOn: formatGoTime(snap.createdOn),
    immutabilityExpriyTime: snap.immutabilityExpiryTime === undefined ? GO_ZERO_TIME : formatGoTime(snap.immutabilityExpiryTime),
    versionID: snap.versionId ?? null,
    kind: snap.kind,
    snapDir: snap.snapDir,
    snapName: snap.snapName + chunkPart(snap),
    prefix: snap.prefix,
    compressionSuffix: snap.compressionSuffix,
    startRevision: snap.startRevision,
    lastRevision: snap.lastRevision,
    isChunk: snap.isChunk,
    isFinal: snap.isFinal,
  };
}

/**
 * Reads upstream's JSON (for example a peer's `/snapshot/latest`). Missing optional fields take Go's
 * zero values; a wrong type or an unparsable time throws E_BAD_NAME.
 */
export function snapshotFromJSON(obj: unknown): Snapshot {
  const fail = (reason: string): never => {
    throw new SnapStoreError('E_BAD_NAME', `invalid snapshot JSON: ${reason}`);
  };
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) return fail('not an object');
  const o = obj as Record<string, unknown>;
  const str = (k: string, required: boolean): string => {
    const v = o[k];
    if (v === undefined && !required) return '';
    return typeof v === 'string' ? v : fail(`${k} must be a string`);
  };
  const bool = (k: string): boolean => {
    const v = o[k];
    if (v === undefined) return false;
    return typeof v === 'boolean' ? v : fail(`${k} must be a boolean`);
  };
  const rev = (k: string): number => {
    const v = o[k];
    if (v === undefined) return 0;
    return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : fail(`${k} must be a non-negative integer`);
  };
  const time = (k: string, required: boolean): Date | undefined => {
    const s = str(k, required);
    if (s === '' && !required) return undefined;
    return parseGoTime(s) ?? fail(`${k} ${JSON.stringify(s)} is not an RFC 3339 time`);
  };
  const kind = o['kind'];
  if (kind !== 'Full' && kind !== 'Incr') return fail(`unknown kind ${JSON.stringify(kind)}`);
  const createdOn = time('createdOn', true) as Date;
  let snapName = str('snapName', true);
  const isChunk = bool('isChunk');
  const snap: Snapshot = {
    kind,
    startRevision: rev('startRevision'),
    lastRevision: rev('lastRevision'),
    createdOn,
    snapDir: str('snapDir', false),
    snapName,
    prefix: str('prefix', false),
    compressionSuffix: str('compressionSuffix', false),
    isChunk,
    isFinal: bool('isFinal'),
  };
  // Upstream's JSON has no such field: an encrypted object is told by its name, as in listings.
  const bare = snapName.replace(/\/[0-9]+$/, '');
  if ((bare.endsWith(FINAL_SUFFIX) ? bare.slice(0, -FINAL_SUFFIX.length) : bare).endsWith(ENCRYPTED_SUFFIX)) snap.isEncrypted = true;
  if (isChunk) {
    const slash = snapName.lastIndexOf('/');
    const token = snapName.slice(slash + 1);
    const n = slash >= 0 && DIGITS.test(token) ? Number(token) : NaN;
    if (!Number.isSafeInteger(n)) return fail(`chunk snapName ${JSON.stringify(snapName)} does not end in /<chunk number>`);
    snapName = snapName.slice(0, slash);
    snap.snapName = snapName;
    snap.chunkNumber = n;
  }
  const expiry = time('immutabilityExpriyTime', false);
  // Go's zero time means "no expiry"; anything in year 1 or earlier is that zero value in practice.
  if (expiry !== undefined && expiry.getTime() > ZERO_TIME_MS) snap.immutabilityExpiryTime = expiry;
  const versionID = o['versionID'];
  if (versionID !== undefined && versionID !== null) {
    if (typeof versionID !== 'string') return fail('versionID must be a string or null');
    snap.versionId = versionID;
  }
  return snap;
}

const ZERO_TIME_MS = (parseGoTime(GO_ZERO_TIME) as Date).getTime();
