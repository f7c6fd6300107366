/**
 * The lean HTTP/2 client's frame codec on bytes alone (src/etcd/h2-frames.ts, h2-frame-reader.ts,
 * h2-frame-writer.ts): the frame header both ways, the payload decoders and the problems they name, frames
 * cut apart anywhere by the socket's reads, and frames staged into one write per event-loop turn.
 */
import { describe, expect, it } from 'vitest';
import { FrameReader } from '../../src/etcd/h2-frame-reader.js';
import { FrameWriter, type ByteSink } from '../../src/etcd/h2-frame-writer.js';
import {
  CANCEL,
  DATA,
  dataLength,
  decodeGoAway,
  decodeRstStream,
  decodeSettings,
  decodeWindowUpdate,
  errorName,
  FLAG_ACK,
  FLAG_END_STREAM,
  FLAG_PADDED,
  FLAG_PRIORITY,
  FLOW_CONTROL_ERROR,
  FRAME_HEADER_BYTES,
  FRAME_SIZE_ERROR,
  frameFlags,
  frameLength,
  frameStreamId,
  frameType,
  GOAWAY,
  HEADERS,
  headersFit,
  isFrameProblem,
  PING,
  pingProblem,
  PREFACE,
  PROTOCOL_ERROR,
  RST_STREAM,
  SETTINGS,
  WINDOW_UPDATE,
  writeFrameHeader,
} from '../../src/etcd/h2-frames.js';

/** A whole frame: header and payload. */
function frame(type: number, flags: number, streamId: number, payload: Buffer | number[] = []): Buffer {
  const body = Buffer.from(payload);
  const out = Buffer.alloc(FRAME_HEADER_BYTES + body.length);
  writeFrameHeader(out, 0, body.length, type, flags, streamId);
  body.copy(out, FRAME_HEADER_BYTES);
  return out;
}

const u32 = (v: number): number[] => [v >>> 24, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff];
const setting = (id: number, value: number): number[] => [id >>> 8, id & 0xff, ...u32(value)];

describe('HTTP/2 frame format', () => {
  it('writes a frame header as RFC 9113 §4.1 lays it out, and reads it back without the reserved bit', () => {
    const out = Buffer.alloc(FRAME_HEADER_BYTES + 2);
    expect(writeFrameHeader(out, 2, 0x012345, DATA, FLAG_END_STREAM, 0x7fff_fffe)).toBe(2 + FRAME_HEADER_BYTES);
    expect(out.subarray(2).toString('hex')).toBe('012345' + '00' + '01' + '7ffffffe');
    out[2 + 5]! |= 0x80; // the reserved bit, which a receiver must ignore
    expect([frameLength(out, 2), frameType(out, 2), frameFlags(out, 2), frameStreamId(out, 2)]).toEqual([0x012345, DATA, 1, 0x7fff_fffe]);
    expect(PREFACE.toString('latin1')).toBe('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  });

  it('finds the data of a DATA frame past its padding, and padding that exceeds the frame', () => {
    const payload = Buffer.from([3, 0x61, 0x62, 0, 0, 0]); // pad length 3, "ab", 3 bytes of padding
    expect(dataLength(payload, 0, payload.length, FLAG_PADDED)).toBe(2);
    expect(dataLength(payload, 0, payload.length, 0)).toBe(6);
    expect(dataLength(payload, 0, 3, FLAG_PADDED)).toBe(-1); // 1 + 3 bytes of padding in 3
    expect(dataLength(payload, 0, 4, FLAG_PADDED)).toBe(0);
    expect(dataLength(payload, 0, 0, FLAG_PADDED)).toBe(-1); // no room for the pad length itself
  });

  it('checks that the padding and priority of HEADERS fit in the frame', () => {
    const payload = Buffer.from([2, 0, 0, 0, 0, 0, 0xaa, 0, 0]);
    expect(headersFit(payload, 0, 9, FLAG_PADDED | FLAG_PRIORITY)).toBe(true); // 1 + 2 padding + 5 priority
    expect(headersFit(payload, 0, 7, FLAG_PADDED | FLAG_PRIORITY)).toBe(false);
    expect(headersFit(payload, 0, 4, FLAG_PRIORITY)).toBe(false);
    expect(headersFit(payload, 0, 0, 0)).toBe(true);
  });

  it('decodes SETTINGS: the values the client heeds, the last of a repeated one, acknowledgements and malformed frames', () => {
    const body = Buffer.from([...setting(3, 100), ...setting(4, 1 << 20), ...setting(0x99, 7), ...setting(3, 4), ...setting(5, 32_768)]);
    expect(decodeSettings(body, 0, body.length, 0, 0)).toEqual({ maxConcurrentStreams: 4, initialWindow: 1 << 20, maxFrameSize: 32_768 });
    expect(decodeSettings(body, 0, 0, 0, 0)).toEqual({});
    expect(decodeSettings(body, 0, 0, FLAG_ACK, 0)).toBe('ack');
    expect(decodeSettings(body, 0, 6, FLAG_ACK, 0)).toEqual({ problem: 'sent a SETTINGS ACK with a payload', code: FRAME_SIZE_ERROR });
    expect(decodeSettings(body, 0, 6, 0, 1)).toEqual({ problem: 'sent SETTINGS on stream 1', code: PROTOCOL_ERROR });
    expect(decodeSettings(body, 0, 7, 0, 0)).toEqual({ problem: 'sent SETTINGS of 7 bytes, not a multiple of 6', code: FRAME_SIZE_ERROR });
    const window = Buffer.from(setting(4, 2 ** 31));
    expect(decodeSettings(window, 0, 6, 0, 0)).toEqual({
      problem: 'announced an initial window of 2147483648, over 2^31-1',
      code: FLOW_CONTROL_ERROR,
    });
    for (const size of [16_383, 16_777_216]) {
      const frameSize = Buffer.from(setting(5, size));
      expect(decodeSettings(frameSize, 0, 6, 0, 0)).toEqual({
        problem: `announced a max frame size of ${size}, outside 16384..16777215`,
        code: PROTOCOL_ERROR,
      });
    }
  });

  it('decodes GOAWAY, WINDOW_UPDATE and RST_STREAM, and names malformed ones and PINGs', () => {
    const goAway = Buffer.from([...u32(0x8000_0007), ...u32(0xb), ...Buffer.from('too many pings')]);
    expect(decodeGoAway(goAway, 0, goAway.length)).toEqual({
      lastStreamId: 7,
      description: 'GOAWAY code 11 (ENHANCE_YOUR_CALM) "too many pings"',
    });
    expect(decodeGoAway(goAway, 0, 8)).toEqual({ lastStreamId: 7, description: 'GOAWAY code 11 (ENHANCE_YOUR_CALM)' });
    expect(decodeGoAway(goAway, 0, 7)).toEqual({ problem: 'sent a GOAWAY of 7 bytes', code: FRAME_SIZE_ERROR });

    expect(decodeWindowUpdate(Buffer.from(u32(0x8000_0400)), 0, 4)).toBe(0x400);
    expect(decodeWindowUpdate(Buffer.from(u32(1)), 0, 3)).toEqual({ problem: 'sent a WINDOW_UPDATE of 3 bytes', code: FRAME_SIZE_ERROR });

    expect(decodeRstStream(Buffer.from(u32(CANCEL)), 0, 4, 3)).toBe(CANCEL);
    expect(decodeRstStream(Buffer.from(u32(CANCEL)), 0, 4, 0)).toEqual({
      problem: 'sent a malformed RST_STREAM (4 bytes, stream 0)',
      code: PROTOCOL_ERROR,
    });
    expect(decodeRstStream(Buffer.from(u32(CANCEL)), 0, 5, 3)).toEqual({
      problem: 'sent a malformed RST_STREAM (5 bytes, stream 3)',
      code: FRAME_SIZE_ERROR,
    });

    expect(pingProblem(8, 0)).toBeUndefined();
    expect(pingProblem(8, 1)).toEqual({ problem: 'sent a malformed PING (8 bytes, stream 1)', code: PROTOCOL_ERROR });
    expect(pingProblem(4, 0)).toEqual({ problem: 'sent a malformed PING (4 bytes, stream 0)', code: FRAME_SIZE_ERROR });
    expect(isFrameProblem(pingProblem(4, 0))).toBe(true);
    expect(isFrameProblem(3)).toBe(false);
    expect([errorName(CANCEL), errorName(99)]).toEqual(['8 (CANCEL)', '99 (unknown)']);
  });
});

/** What a FrameReader hands over, with the frames as copies. */
function reading(options: { maxFrame?: number; refuseType?: number; stopAfter?: number } = {}) {
  const frames: Buffer[] = [];
  const reader = new FrameReader(
    {
      accept: (buf, at) => buf[at + 3] !== options.refuseType,
      frame: (buf, at, length) => {
        frames.push(Buffer.from(buf.subarray(at, at + FRAME_HEADER_BYTES + length)));
        return frames.length !== options.stopAfter;
      },
    },
    64,
    options.maxFrame ?? 40,
  );
  /** Feeds `bytes` as the socket would, in reads of the given sizes (the rest in one read). */
  const feed = (bytes: Buffer, sizes: number[]): void => {
    let at = 0;
    for (const size of [...sizes, bytes.length]) {
      if (at >= bytes.length) break;
      const n = Math.min(size, bytes.length - at, reader.buffer.length);
      bytes.copy(reader.buffer, 0, at, at + n);
      reader.read(n);
      at += n;
    }
  };
  return { frames, feed };
}

describe('reading frames from a socket', () => {
  const stream = [
    frame(SETTINGS, 0, 0, setting(4, 1000)),
    frame(HEADERS, 4, 1, Buffer.alloc(20, 0xab)),
    frame(DATA, 0, 1, Buffer.alloc(40, 0xcd)),
    frame(PING, 0, 0, Buffer.alloc(8, 7)),
    frame(DATA, 1, 1, []),
  ];
  const bytes = Buffer.concat(stream);

  it('hands over the same frames however the reads cut them', () => {
    for (const size of [1, 2, 5, 8, 9, 10, 17, 49, 64]) {
      const { frames, feed } = reading();
      feed(
        bytes,
        Array.from({ length: Math.ceil(bytes.length / size) }, () => size),
      );
      expect(frames, `reads of ${size} bytes`).toEqual(stream);
    }
    // Cuts in every place of a pair of reads.
    for (let cut = 1; cut < bytes.length; cut++) {
      const { frames, feed } = reading();
      feed(bytes, [Math.min(cut, 64), ...Array.from({ length: 10 }, () => 64)]);
      expect(frames, `a read ending at ${cut}`).toEqual(stream);
    }
  });

  it('stops where the handler refuses a frame or stops taking them', () => {
    const refused = reading({ refuseType: DATA });
    refused.feed(bytes, [64, 64, 64]);
    expect(refused.frames).toEqual(stream.slice(0, 2));

    const stopped = reading({ stopAfter: 3 });
    stopped.feed(bytes, [64, 64, 64]);
    expect(stopped.frames).toEqual(stream.slice(0, 3));
  });
});

/** A sink that keeps what is written, and tells when the next write comes. */
function sink(): ByteSink & { writes: Buffer[]; next(): Promise<Buffer> } {
  const writes: Buffer[] = [];
  let wake: ((b: Buffer) => void) | undefined;
  return {
    destroyed: false,
    writableEnded: false,
    writes,
    write(bytes: Buffer) {
      const copy = Buffer.from(bytes);
      writes.push(copy);
      wake?.(copy);
      return true;
    },
    next: () => new Promise((resolve) => (wake = resolve)),
  };
}

describe('writing frames to a socket', () => {
  it('sends what one event-loop turn staged as one write, each control frame as RFC 9113 §6 lays it out', async () => {
    const s = sink();
    const w = new FrameWriter(s);
    const written = s.next();
    w.preface();
    w.settings([
      [2, 0],
      [4, 1 << 24],
    ]);
    w.settingsAck();
    w.windowUpdate(0, 0x00ff_0000);
    w.rstStream(3, CANCEL);
    w.goAway(0, PROTOCOL_ERROR);
    w.pingAck(Buffer.from('xx12345678'), 2);
    expect(s.writes).toEqual([]); // not before the turn ends

    expect(await written).toEqual(
      Buffer.concat([
        PREFACE,
        frame(SETTINGS, 0, 0, [...setting(2, 0), ...setting(4, 1 << 24)]),
        frame(SETTINGS, FLAG_ACK, 0),
        frame(WINDOW_UPDATE, 0, 0, u32(0x00ff_0000)),
        frame(RST_STREAM, 0, 3, u32(CANCEL)),
        frame(GOAWAY, 0, 0, [...u32(0), ...u32(PROTOCOL_ERROR)]),
        frame(PING, FLAG_ACK, 0, Buffer.from('12345678')),
      ]),
    );
    expect(s.writes).toHaveLength(1);
  });

  it('moves to a larger buffer when one turn stages more than it holds, and loses no frame on the way', async () => {
    const s = sink();
    // Room for one 13-byte frame: each later one takes a new buffer, with the frames staged before it.
    const w = new FrameWriter(s, 16);
    const written = s.next();
    const expected: Buffer[] = [];
    for (let i = 1; i <= 5; i++) {
      w.windowUpdate(2 * i + 1, 1000 * i);
      w.rstStream(2 * i + 1, i);
      expected.push(frame(WINDOW_UPDATE, 0, 2 * i + 1, u32(1000 * i)), frame(RST_STREAM, 0, 2 * i + 1, u32(i)));
    }
    const at = w.frame(3, DATA, FLAG_END_STREAM, 9);
    w.out.write('abc', at, 'latin1');
    expected.push(frame(DATA, FLAG_END_STREAM, 9, Buffer.from('abc')));
    expect(await written).toEqual(Buffer.concat(expected));
  });

  it('writes nothing to a socket that is ended or destroyed', () => {
    const s = { ...sink(), writableEnded: true };
    const w = new FrameWriter(s);
    w.settingsAck();
    w.flush();
    expect(s.writes).toEqual([]);
  });
});
