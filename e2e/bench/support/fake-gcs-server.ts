/**
 * The fake GCS JSON API server (snapstore/test/support/fake-gcs.ts) as its own process, for benches that
 * measure the RSS of the process talking to it: the fake's request handling and buffers must not count.
 *
 *   node --conditions=development --import tsx e2e/bench/support/fake-gcs-server.ts --bucket=bench
 *
 * Prints one JSON line `{"endpoint":"http://127.0.0.1:<port>"}` once it listens (port 0: the OS picks a
 * free one). Stops, removing its data, when its stdin closes (the parent ended it or died) or on SIGTERM.
 * CRC32C is off: the only implementation at hand is pure JS at ~100 MB/s and would make the fake, not the
 * client, the bottleneck; MD5 is still computed for every object.
 */
import { FakeGcsServer } from '../../../snapstore/test/support/fake-gcs.js';

const bucket = process.argv.find((a) => a.startsWith('--bucket='))?.slice('--bucket='.length);
if (!bucket) {
  console.error('fake-gcs-server: --bucket=<name> is required');
  process.exit(2);
}

const fake = await FakeGcsServer.start({ buckets: [bucket], crc32c: false });
let stopping = false;
const stop = (): void => {
  if (stopping) return;
  stopping = true;
  fake.stop().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(`fake-gcs-server: stop failed: ${String(err)}`);
      process.exit(1);
    },
  );
};
process.stdin.on('end', stop).on('error', stop).resume();
process.once('SIGTERM', stop);
console.log(JSON.stringify({ endpoint: fake.endpoint }));
