import type { CompactCommandConfig } from '../../config/types.js';
import type { CommandContext } from '../context.js';
import { notImplemented } from '../context.js';

/** `etcdbrctl compact`: flags are parsed and validated; the work itself arrives in a later version. */
export async function run(_config: CompactCommandConfig, ctx: CommandContext): Promise<number> {
  return notImplemented('compact', ctx);
}
