import type { CopyCommandConfig } from '../../config/types.js';
import type { CommandContext } from '../context.js';
import { notImplemented } from '../context.js';

/** `etcdbrctl copy`: flags are parsed and validated; the work itself arrives in a later version. */
export async function run(_config: CopyCommandConfig, ctx: CommandContext): Promise<number> {
  return notImplemented('copy', ctx);
}
