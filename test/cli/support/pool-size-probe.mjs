// Loaded with --import into a process bin/etcdbrctl runs: writes the Buffer pool size the process ended with,
// and the memory-first mark bin/etcdbrctl left for src/speed-first.ts (null: none), as JSON to the file
// POOL_SIZE_PROBE_OUT names (test/cli/bin.test.ts).
import { writeFileSync } from 'node:fs';

process.on('exit', () => {
  const mark = globalThis[Symbol.for('etcdbrctl.memoryFirst')] ?? null;
  if (process.env.POOL_SIZE_PROBE_OUT) writeFileSync(process.env.POOL_SIZE_PROBE_OUT, JSON.stringify({ poolSize: Buffer.poolSize, mark }));
});
