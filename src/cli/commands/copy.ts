import { openSnapStore, type SnapStore } from '@etcdbrctl/snapstore';
import { systemClock } from '../../clock.js';
import { storeLocation } from '../../config/store.js';
import type { CopyCommandConfig } from '../../config/types.js';
import { CopyError, copyBackups } from '../../copier/copier.js';
import { saveBufferBytes } from '../../copier/save-buffer.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';

/**
 * `etcdbrctl copy`: copies backups from the source store (`--source-*`, `SOURCE_*` credentials) to the
 * destination store (see src/copier/copier.ts). Exit 1 when any object failed, after trying all of them.
 */
export async function run(config: CopyCommandConfig, ctx: CommandContext): Promise<number> {
  const sourceConfig = ctx.stores.source;
  const destinationConfig = ctx.stores.primary;
  if (!sourceConfig || !destinationConfig) {
    const which = !sourceConfig ? 'source store: give --source-storage-provider' : 'destination store: give --storage-provider';
    ctx.io.stderr.write(`Error: no ${which} (Local, S3, ABS, GCS, Swift, OSS, ECS or OCS) and its container\n`);
    return 1;
  }
  let source: SnapStore | undefined;
  let destination: SnapStore | undefined;
  try {
    source = await openSnapStore(sourceConfig, { readOnly: true });
    destination = await openSnapStore(destinationConfig);
    const result = await copyBackups(
      {
        source,
        destination,
        logger: ctx.logger,
        clock: systemClock,
        signal: ctx.signal,
        saveBufferBytes: saveBufferBytes(destinationConfig),
        sourceLocation: storeLocation(sourceConfig),
      },
      config.copierConfig,
    );
    // With nothing to copy, the summary says where the source was looked for (a wrong prefix copies nothing too).
    const why = result.nothingFound !== undefined ? `; ${result.nothingFound}` : '';
    ctx.io.stdout.write(
      `Copied ${result.copied.length} snapshot(s), ${result.bytes} bytes; ${result.skipped.length} already present${why}\n`,
    );
    return 0;
  } catch (err) {
    if (err instanceof CopyError && !ctx.signal.aborted) {
      for (const f of err.result.failures) ctx.io.stderr.write(`etcdbrctl copy: ${f.error.message}\n`);
      ctx.io.stderr.write(
        `etcdbrctl copy: ${err.result.failures.length} snapshot(s) failed, ${err.result.copied.length} copied, ${err.result.skipped.length} already present\n`,
      );
    } else {
      return reportFailure(ctx.io, ctx.logger, 'etcdbrctl copy', err, { signal: ctx.signal });
    }
    return 1;
  } finally {
    await source?.close();
    await destination?.close();
  }
}
