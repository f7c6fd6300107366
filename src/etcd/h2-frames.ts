/**
 * The HTTP/2 frame format (RFC 9113 §4, §6) as far as the lean client (lean-h2.ts) speaks it: frame types,
 * flags, settings and error codes, the 9-byte frame header, and the checks and decoders of the payloads the
 * client acts on. No socket and no connection state here, so each piece can be tested on bytes alone
 * (test/etcd/h2-frames.test.ts); what a frame then does to the connection stays with the client.
 *
 * A decoder that finds a frame malformed returns a `FrameProblem`: what the peer did wrong, worded to follow
 * the peer's name ("127.0.0.1:2379 sent ..."), and the error code the GOAWAY that ends the connection carries.
 */
import { constantBytes } from '../encoding/constant-bytes.js';

export const FRAME_HEADER_BYTES = 9;

export const DATA = 0x0;
export const HEADERS = 0x1;
export const RST_STREAM = 0x3;
export const SETTINGS = 0x4;
export const PUSH_PROMISE = 0x5;
export const PING = 0x6;
export const GOAWAY = 0x7;
export const WINDOW_UPDATE = 0x8;
export const CONTINUATION = 0x9;

export const FLAG_END_STREAM = 0x1;
export const FLAG_ACK = 0x1;
export const FLAG_END_HEADERS = 0x4;
export const FLAG_PADDED = 0x8;
export const FLAG_PRIORITY = 0x20;

export const SETTINGS_ENABLE_PUSH = 0x2;
export const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
export const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
export const SETTINGS_MAX_FRAME_SIZE = 0x5;

export const NO_ERROR = 0x0;
export const PROTOCOL_ERROR = 0x1;
export const FLOW_CONTROL_ERROR = 0x3;
export const FRAME_SIZE_ERROR = 0x6;
export const CANCEL = 0x8;
const ERROR_NAMES = [
  'NO_ERROR',
  'PROTOCOL_ERROR',
  'INTERNAL_ERROR',
  'FLOW_CONTROL_ERROR',
  'SETTINGS_TIMEOUT',
  'STREAM_CLOSED',
  'FRAME_SIZE_ERROR',
  'REFUSED_STREAM',
  'CANCEL',
  'COMPRESSION_ERROR',
  'CONNECT_ERROR',
  'ENHANCE_YOUR_CALM',
  'INADEQUATE_SECURITY',
  'HTTP_1_1_REQUIRED',
];

/** The flow-control window every stream and the connection start with. */
export const DEFAULT_WINDOW = 65_535;
export const MAX_WINDOW = 2 ** 31 - 1;
export const MAX_STREAM_ID = 2 ** 31 - 1;
/** The smallest and largest SETTINGS_MAX_FRAME_SIZE; the smallest is every peer's until it says otherwise. */
export const MIN_FRAME_SIZE_SETTING = 16_384;
export const MAX_FRAME_SIZE_SETTING = 16_777_215;
/** What a client sends first (RFC 9113 §3.4), before its SETTINGS. */
export const PREFACE = constantBytes('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/** A peer's frame that breaks the protocol: the reason (after the peer's name) and the GOAWAY code to end with. */
export interface FrameProblem {
  problem: string;
  code: number;
}

export function isFrameProblem(value: unknown): value is FrameProblem {
  return typeof value === 'object' && value !== null && 'problem' in value;
}

/** An error code as messages show it: the number and its RFC name. */
export function errorName(code: number): string {
  return `${code} (${ERROR_NAMES[code] ?? 'unknown'})`;
}

/** The payload length of the frame whose header starts at `buf[at]`. */
export function frameLength(buf: Buffer, at: number): number {
  return (buf[at]! << 16) | (buf[at + 1]! << 8) | buf[at + 2]!;
}

export function frameType(buf: Buffer, at: number): number {
  return buf[at + 3]!;
}

export function frameFlags(buf: Buffer, at: number): number {
  return buf[at + 4]!;
}

/** The stream id, its reserved high bit dropped. */
export function frameStreamId(buf: Buffer, at: number): number {
  return buf.readUInt32BE(at + 5) & 0x7fffffff;
}

/** Writes a frame header at `out[at]`; returns where the payload goes. */
export function writeFrameHeader(out: Buffer, at: number, length: number, type: number, flags: number, streamId: number): number {
  out[at] = length >>> 16;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(streamId, at + 5);
  return at + FRAME_HEADER_BYTES;
}

/**
 * Where the data of a DATA frame with payload `buf[p, p + length)` lies past its padding: its length, -1 when
 * the padding exceeds the frame. The data start at `p + 1` when the frame is PADDED, at `p` otherwise.
 */
export function dataLength(buf: Buffer, p: number, length: number, flags: number): number {
  if ((flags & FLAG_PADDED) === 0) return length;
  if (length === 0) return -1;
  const pad = buf[p]!;
  return 1 + pad > length ? -1 : length - 1 - pad;
}

/** Whether a HEADERS frame's padding and priority fields fit in its payload (the header block is not read). */
export function headersFit(buf: Buffer, p: number, length: number, flags: number): boolean {
  let overhead = 0;
  if ((flags & FLAG_PADDED) !== 0) overhead += 1 + (length > 0 ? buf[p]! : 0);
  if ((flags & FLAG_PRIORITY) !== 0) overhead += 5;
  return overhead <= length;
}

/** What a peer's SETTINGS changes of what the client heeds; an absent field: not in the frame. */
export interface PeerSettings {
  maxConcurrentStreams?: number;
  initialWindow?: number;
  maxFrameSize?: number;
}

/**
 * A SETTINGS frame: 'ack' for an acknowledgement of ours, else the values it sets (the last of a repeated
 * one), or what is wrong with it. Settings the client does not heed are skipped, as RFC 9113 §6.5.2 asks.
 */
export function decodeSettings(
  buf: Buffer,
  p: number,
  length: number,
  flags: number,
  streamId: number,
): PeerSettings | 'ack' | FrameProblem {
  if (streamId !== 0) return { problem: `sent SETTINGS on stream ${streamId}`, code: PROTOCOL_ERROR };
  if ((flags & FLAG_ACK) !== 0) return length === 0 ? 'ack' : { problem: 'sent a SETTINGS ACK with a payload', code: FRAME_SIZE_ERROR };
  if (length % 6 !== 0) return { problem: `sent SETTINGS of ${length} bytes, not a multiple of 6`, code: FRAME_SIZE_ERROR };
  const out: PeerSettings = {};
  for (let i = p; i < p + length; i += 6) {
    const id = buf.readUInt16BE(i);
    const value = buf.readUInt32BE(i + 2);
    if (id === SETTINGS_MAX_CONCURRENT_STREAMS) {
      out.maxConcurrentStreams = value;
    } else if (id === SETTINGS_INITIAL_WINDOW_SIZE) {
      if (value > MAX_WINDOW) return { problem: `announced an initial window of ${value}, over 2^31-1`, code: FLOW_CONTROL_ERROR };
      out.initialWindow = value;
    } else if (id === SETTINGS_MAX_FRAME_SIZE) {
      if (value < MIN_FRAME_SIZE_SETTING || value > MAX_FRAME_SIZE_SETTING) {
        return {
          problem: `announced a max frame size of ${value}, outside ${MIN_FRAME_SIZE_SETTING}..${MAX_FRAME_SIZE_SETTING}`,
          code: PROTOCOL_ERROR,
        };
      }
      out.maxFrameSize = value;
    }
  }
  return out;
}

/** A GOAWAY: the last stream the peer processed, and how messages name the frame (code and debug text). */
export interface GoAway {
  lastStreamId: number;
  description: string;
}

export function decodeGoAway(buf: Buffer, p: number, length: number): GoAway | FrameProblem {
  if (length < 8) return { problem: `sent a GOAWAY of ${length} bytes`, code: FRAME_SIZE_ERROR };
  const debug = buf.toString('utf8', p + 8, p + length);
  return {
    lastStreamId: buf.readUInt32BE(p) & 0x7fffffff,
    description: `GOAWAY code ${errorName(buf.readUInt32BE(p + 4))}${debug === '' ? '' : ` "${debug}"`}`,
  };
}

/** A WINDOW_UPDATE's increment (0 is the caller's to judge: an error on the connection, a reset on a stream). */
export function decodeWindowUpdate(buf: Buffer, p: number, length: number): number | FrameProblem {
  if (length !== 4) return { problem: `sent a WINDOW_UPDATE of ${length} bytes`, code: FRAME_SIZE_ERROR };
  return buf.readUInt32BE(p) & 0x7fffffff;
}

/** A RST_STREAM's error code. */
export function decodeRstStream(buf: Buffer, p: number, length: number, streamId: number): number | FrameProblem {
  if (length !== 4 || streamId === 0) {
    return {
      problem: `sent a malformed RST_STREAM (${length} bytes, stream ${streamId})`,
      code: length !== 4 ? FRAME_SIZE_ERROR : PROTOCOL_ERROR,
    };
  }
  return buf.readUInt32BE(p);
}

/** What is wrong with a PING's header, if anything: 8 bytes on stream 0. */
export function pingProblem(length: number, streamId: number): FrameProblem | undefined {
  if (length === 8 && streamId === 0) return undefined;
  return { problem: `sent a malformed PING (${length} bytes, stream ${streamId})`, code: length !== 8 ? FRAME_SIZE_ERROR : PROTOCOL_ERROR };
}
