import type { RestoreCommandConfig } from '../../config/types.js';
import type { CommandContext } from '../context.js';
import { notImplemented } from '../context.js';

/** `etcdbrctl restore`: flags are parsed and validated; the work itself arrives in a later version. */
export async function run(_config: RestoreCommandConfig, ctx: CommandContext): Promise<number> {
  return notImplemented('restore', ctx);
}
