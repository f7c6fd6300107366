import type { Logger } from '../log.js';
import type { CliIO } from './context.js';

/**
 * Reports a failed command: one line an operator can act on (our errors say what was wrong, where, and what
 * to do), as `Error: …` like every other error the CLI prints. The stack and the cause chain are for developers, so they are logged
 * at debug level only (`--log-level=debug`). Returns the exit code, 1.
 */
export function reportFailure(io: CliIO, logger: Logger, command: string, err: unknown): number {
  logger.debug({ err }, `${command} failed`);
  io.stderr.write(`Error: ${err instanceof Error ? err.message : String(err)}\n`);
  return 1;
}
