/** The mapping from a failed command's error to the one line an operator reads and the exit code. */
import { Writable } from 'node:stream';
import { SnapStoreError } from '@etcdbrctl/snapstore';
import { describe, expect, it } from 'vitest';
import { describeFailure, reportFailure } from '../../src/cli/failure.js';
import { EtcdbrError } from '../../src/errors.js';
import { EtcdError } from '../../src/etcd/errors.js';
import { EtcdConfigError } from '../../src/config/etcd-config.js';
import { KubeError } from '../../src/k8s/errors.js';
import { createLogger } from '../../src/log.js';

describe('describeFailure', () => {
  it('store errors: the message, then what to do where the code implies it', () => {
    const creds = describeFailure(
      new SnapStoreError(
        'E_CREDENTIALS',
        'AWS_APPLICATION_CREDENTIALS_JSON: cannot read credential file /x.json: no such file or directory',
      ),
    );
    expect(creds.exitCode).toBe(1);
    expect(creds.line).toMatch(
      /^Error: AWS_APPLICATION_CREDENTIALS_JSON: cannot read credential file \/x\.json: no such file or directory; check the credentials/,
    );

    const down = describeFailure(
      new SnapStoreError('E_UNREACHABLE', 'list s3://b/: cannot reach S3 endpoint http://127.0.0.1:9: connect ECONNREFUSED 127.0.0.1:9'),
    );
    expect(down.line).toBe(
      "Error: list s3://b/: cannot reach S3 endpoint http://127.0.0.1:9: connect ECONNREFUSED 127.0.0.1:9; check the store's endpoint and that it can be reached from here, then run the command again",
    );

    // A message that already says what to do gets nothing added.
    const missing = describeFailure(new SnapStoreError('E_NOT_FOUND', 'local store directory /s does not exist: check --store-container'));
    expect(missing).toEqual({ exitCode: 1, line: 'Error: local store directory /s does not exist: check --store-container' });
  });

  it('the etcd client cannot reach etcd: said in words, with the flags to check', () => {
    // As our client throws it when no connection could be made.
    const err = new EtcdError(
      'E_ETCD_UNAVAILABLE',
      '14 UNAVAILABLE: No connection established. Last error: Error: connect ECONNREFUSED 127.0.0.1:1. Resolution note: ',
    );
    const expected = {
      exitCode: 1,
      line:
        'Error: cannot reach etcd: 14 UNAVAILABLE: No connection established. Last error: Error: connect ECONNREFUSED 127.0.0.1:1; ' +
        'check --endpoints (and the TLS flags) and that etcd is running there',
    };
    expect(describeFailure(err)).toEqual(expected);
    for (const code of ['E_ETCD_TIMEOUT', 'E_ETCD_CLOSED'] as const) {
      expect(describeFailure(new EtcdError(code, 'x')).line).toBe(`Error: cannot reach etcd: x; ${expected.line.split('; ').pop()}`);
    }
    expect(describeFailure(new EtcdError('E_ETCD_REQUEST', 'etcdserver: member not found')).line).toBe(
      'Error: etcdserver: member not found',
    );
  });

  it('other typed errors and system errors', () => {
    expect(describeFailure(new EtcdConfigError('etcd config /c.yaml line 3: bad')).line).toBe('Error: etcd config /c.yaml line 3: bad');
    expect(describeFailure(new KubeError('E_KUBE_FORBIDDEN', 'lease ns/x: forbidden (403)')).line).toMatch(
      /^Error: lease ns\/x: forbidden \(403\); check the kubeconfig/,
    );
    const eacces = Object.assign(new Error("EACCES: permission denied, mkdir '/var/etcd'"), { code: 'EACCES' });
    expect(describeFailure(eacces).line).toBe(
      "Error: EACCES: permission denied, mkdir '/var/etcd'; check the permissions of that path for the user this runs as",
    );
  });

  it('always one line, whatever the message or the thrown value', () => {
    expect(describeFailure(new Error('first\n  second\n\n')).line).toBe('Error: first second');
    expect(describeFailure('a string').line).toBe('Error: a string');
    expect(describeFailure(undefined)).toEqual({ exitCode: 1, line: 'Error: undefined' });
  });
});

describe('reportFailure', () => {
  const capture = () => {
    let text = '';
    const stream = new Writable({
      write(chunk: Buffer, _enc, cb) {
        text += chunk.toString();
        cb();
      },
    });
    return { stream, text: () => text };
  };

  it('writes the one line; the stack goes to the log only at debug level', () => {
    for (const [logLevel, stackLogged] of [
      [4, false],
      [5, true],
    ] as const) {
      const out = capture();
      const log = capture();
      const code = reportFailure(
        { stdout: out.stream, stderr: out.stream },
        createLogger({ logLevel, destination: log.stream }),
        'etcdbrctl ls',
        new Error('boom'),
      );
      expect(code).toBe(1);
      expect(out.text()).toBe('Error: boom\n');
      expect(log.text().includes('"stack"')).toBe(stackLogged);
    }
  });

  it('after the stop signal, any failure is the interruption: not "cannot reach etcd" for an etcd the signal reached too', () => {
    const stop = new AbortController();
    const etcdGone = new EtcdError('E_ETCD_UNAVAILABLE', '14 UNAVAILABLE: No connection established');
    const run = (signal: AbortSignal) => {
      const out = capture();
      const code = reportFailure(
        { stdout: out.stream, stderr: out.stream },
        createLogger({ destination: capture().stream }),
        'etcdbrctl restore',
        etcdGone,
        {
          signal,
          interruptedNote: 'the data dir was left as it was',
        },
      );
      return { code, text: out.text() };
    };
    expect(run(stop.signal).text).toMatch(/^Error: cannot reach etcd: /);
    stop.abort(new EtcdbrError('E_STOPPED', 'received SIGINT'));
    expect(run(stop.signal)).toEqual({
      code: 1,
      text: 'Error: etcdbrctl restore was interrupted (received SIGINT) before it finished; the data dir was left as it was\n',
    });
  });
});
