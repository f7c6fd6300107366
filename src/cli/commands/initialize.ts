import type { InitializeCommandConfig } from '../../config/types.js';
import type { CommandContext } from '../context.js';
import { notImplemented } from '../context.js';

/** `etcdbrctl initialize`: flags are parsed and validated; the work itself arrives in a later version. */
export async function run(_config: InitializeCommandConfig, ctx: CommandContext): Promise<number> {
  return notImplemented('initialize', ctx);
}
