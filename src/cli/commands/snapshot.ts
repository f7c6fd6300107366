import type { SnapshotCommandConfig } from '../../config/types.js';
import { STORE_ENV_PREFIX } from '../../config/store.js';
import { createEtcdClient } from '../../etcd/client.js';
import { systemClock } from '../../clock.js';
import { Metrics } from '../../metrics.js';
import { snapshotterFactory } from '../../snapshotter/from-config.js';
import { RotatingStore } from '../../snapshotter/store-provider.js';
import type { CommandContext } from '../context.js';

/**
 * `etcdbrctl snapshot`: a full snapshot at once, then the snapshot schedule and garbage collection,
 * without HTTP server or leader election, until SIGTERM (then the buffered events become a last delta).
 */
export async function run(config: SnapshotCommandConfig, ctx: CommandContext): Promise<number> {
  if (!ctx.stores.primary) {
    ctx.io.stderr.write('etcdbrctl snapshot: --storage-provider is required\n');
    return 1;
  }
  const conn = config.etcdConnectionConfig;
  const client = await createEtcdClient({
    endpoints: conn.endpoints,
    username: conn.username,
    password: conn.password,
    certFile: conn.certFile,
    keyFile: conn.keyFile,
    caFile: conn.caFile,
    insecureTransport: conn.insecureTransport,
    insecureSkipVerify: conn.insecureSkipVerify,
    connectionTimeoutMs: conn.connectionTimeout,
  });
  const store = new RotatingStore({
    resolve: () => ctx.resolveStore('primary'),
    env: ctx.env,
    envPrefix: STORE_ENV_PREFIX.primary,
    logger: ctx.logger,
  });
  const factory = snapshotterFactory({
    connection: conn,
    snapshotter: config.snapshotterConfig,
    compression: config.compressionConfig,
    client,
    store: () => store.get(),
    clock: systemClock,
    logger: ctx.logger,
    metrics: new Metrics(),
  });
  const gcStop = new AbortController();
  try {
    const snapshotter = await factory.createSnapshotter();
    const gc = factory.createGarbageCollector(snapshotter);
    const gcDone = gc.run(gcStop.signal);
    try {
      await snapshotter.run(ctx.signal, true);
    } finally {
      gcStop.abort();
      await gcDone;
    }
    return 0;
  } catch (err) {
    ctx.logger.error({ err }, 'snapshotter failed');
    ctx.io.stderr.write(`etcdbrctl snapshot: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  } finally {
    await store.close();
    client.close();
  }
}
