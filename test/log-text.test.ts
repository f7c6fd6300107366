import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/log.js';
import { formatLogLine, textLogDestination } from '../src/log-text.js';

describe('--log-format=text', () => {
  it('turns a JSON record into time, level, message and key=value fields', () => {
    const line = JSON.stringify({
      level: 'info',
      time: '2026-11-25T07:25:19.123Z',
      msg: 'restore finished',
      revision: 385,
      dataDir: '/var/etcd data',
    });
    expect(formatLogLine(line)).toBe('2026-11-25T07:25:19.123Z INFO  restore finished revision=385 dataDir="/var/etcd data"\n');
  });

  it('shows an error by its type and message; a line that is not JSON passes unchanged', () => {
    const line = JSON.stringify({
      level: 'warn',
      time: 't',
      msg: 'upload failed',
      err: { type: 'SnapStoreError', message: 'bucket gone', code: 'E_NOT_FOUND' },
    });
    expect(formatLogLine(line)).toBe('t WARN  upload failed err="SnapStoreError: bucket gone"\n');
    expect(formatLogLine('not json')).toBe('not json\n');
  });

  it('a real logger writes text lines through the destination', () => {
    let out = '';
    const logger = createLogger({ destination: textLogDestination({ write: (s: string) => (out += s) }) });
    logger.info({ deltas: 4 }, 'restoring');
    expect(out).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z INFO {2}restoring deltas=4\n$/);
  });

  it('shows an err given as a string as that string', () => {
    let out = '';
    const logger = createLogger({ destination: textLogDestination({ write: (s: string) => (out += s) }) });
    logger.warn({ err: '/etcdserverpb.KV/Txn: stream reset' }, 'replay went on through etcd3');
    expect(out).toMatch(/ WARN {2}replay went on through etcd3 err="\/etcdserverpb\.KV\/Txn: stream reset"\n$/);
  });
});

describe('the log format before flags are parsed (signal lines)', () => {
  it('is read from the command line as pflag would, the last one winning', async () => {
    const { requestedLogFormat } = await import('../src/cli/main.js');
    expect(requestedLogFormat(['server', '--log-format=text'])).toBe('text');
    expect(requestedLogFormat(['server', '--log-format', 'text', '--log-format=json'])).toBe('json');
    expect(requestedLogFormat(['server', '--', '--log-format=text'])).toBeUndefined();
    expect(requestedLogFormat(['server'])).toBeUndefined();
  });
});
