import type { SnapshotCommandConfig } from '../../config/types.js';
import type { CommandContext } from '../context.js';
import { notImplemented } from '../context.js';

/** `etcdbrctl snapshot`: flags are parsed and validated; the work itself arrives in a later version. */
export async function run(_config: SnapshotCommandConfig, ctx: CommandContext): Promise<number> {
  return notImplemented('snapshot', ctx);
}
