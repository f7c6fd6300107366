import type { ServerConfig } from '../../config/types.js';
import type { CommandContext } from '../context.js';
import { notImplemented } from '../context.js';

/** `etcdbrctl server`: flags are parsed and validated; the work itself arrives in a later version. */
export async function run(_config: ServerConfig, ctx: CommandContext): Promise<number> {
  return notImplemented('server', ctx);
}
