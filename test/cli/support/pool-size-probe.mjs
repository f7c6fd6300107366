// Loaded with --import into a process bin/etcdbrctl runs: writes the Buffer pool size the process ended with
// to the file POOL_SIZE_PROBE_OUT names (test/cli/bin.test.ts).
import { writeFileSync } from 'node:fs';

process.on('exit', () => {
  if (process.env.POOL_SIZE_PROBE_OUT) writeFileSync(process.env.POOL_SIZE_PROBE_OUT, String(Buffer.poolSize));
});
