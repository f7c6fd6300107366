import type { ServerConfig } from '../../config/types.js';
import { runSidecar } from '../../server/sidecar.js';
import type { CommandContext } from '../../config/context.js';

/** `etcdbrctl server`: the sidecar (HTTP API, leader-only snapshotter and garbage collection). */
export async function run(config: ServerConfig, ctx: CommandContext): Promise<number> {
  return runSidecar(config, ctx);
}
