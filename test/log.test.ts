/** The process logger: JSON lines; stack traces only at debug level and below. */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/log.js';

function logged(logLevel: number, write: (l: ReturnType<typeof createLogger>) => void): Record<string, unknown> {
  let text = '';
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      text += chunk.toString();
      cb();
    },
  });
  write(createLogger({ logLevel, destination }));
  return JSON.parse(text.trim()) as Record<string, unknown>;
}

describe('createLogger', () => {
  const err = Object.assign(new Error('cannot read /x', { cause: new Error('ENOENT') }), { code: 'E_X' });

  it('below debug: an error keeps its type, message (with its causes) and code, without the stack', () => {
    const line = logged(4, (l) => l.warn({ err }, 'failed'));
    expect(line).toMatchObject({ level: 'warn', msg: 'failed', err: { type: 'Error', message: 'cannot read /x: ENOENT', code: 'E_X' } });
    expect(line.err).not.toHaveProperty('stack');
  });

  it('at debug (--log-level=5): the stack is there', () => {
    const line = logged(5, (l) => l.warn({ err }, 'failed'));
    expect((line.err as { stack?: string }).stack).toMatch(/^Error: cannot read \/x\n\s+at /);
  });

  it('does not repeat a cause the message already quotes', () => {
    const enoent = new Error("ENOENT: no such file or directory, open '/etc/etcd.conf'");
    const wrapped = new Error(`cannot read the etcd config file /etc/etcd.conf: ${enoent.message}`, { cause: enoent });
    const line = logged(4, (l) => l.warn({ err: wrapped }, 'failed'));
    expect((line.err as { message: string }).message).toBe(wrapped.message);
  });

  it('logs a string passed as err as that string, not one field per character', () => {
    expect(logged(4, (l) => l.warn({ err: '/etcd down' }, 'failed')).err).toBe('/etcd down');
  });
});
