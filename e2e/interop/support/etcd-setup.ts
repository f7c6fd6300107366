/**
 * Runs in each interop worker before its test file (vitest setupFiles): puts the etcd line the peer needs
 * (etcd-line.ts) in front. On 3.5, ETCD_BIN names etcd 3.5 (test/support/etcd.ts starts the source and the
 * restored etcds with it, and our CLI processes inherit it) and its folder leads PATH, so etcdctl and
 * etcdutl match; on 3.4 the machine's etcd stays.
 */
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { ETCD35_BIN_DIR } from '../../../test/support/etcd.js';
import { ETCD_LINE_VARIABLE, etcdLineFor } from './etcd-line.js';
import { resolvePeerBinary } from './peer-binary.js';

const line = etcdLineFor(resolvePeerBinary().version, process.env[ETCD_LINE_VARIABLE]);
if (line === '3.5') {
  const etcd = join(ETCD35_BIN_DIR, 'etcd');
  if (!existsSync(etcd)) throw new Error(`the peer needs etcd 3.5 and ${etcd} is missing: run "node scripts/setup.mjs --tests"`);
  process.env.ETCD_BIN = etcd;
  process.env.PATH = `${ETCD35_BIN_DIR}${delimiter}${process.env.PATH ?? ''}`;
}
