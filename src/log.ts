/**
 * The process logger: pino, JSON lines on stderr (stdout stays free for command output such as
 * `etcdbrctl ls -o json`; upstream's logrus also writes to stderr). One logger is created by the CLI and
 * passed to components; nothing logs through a global.
 */
import { pino } from 'pino';
import type { DestinationStream, Level, Logger as PinoLogger } from 'pino';

export type Logger = PinoLogger;

/** Upstream `--log-level` (logrus): 0 panic, 1 fatal, 2 error, 3 warn, 4 info, 5 debug, 6 trace. */
export const DEFAULT_LOGRUS_LEVEL = 4;

/** Maps a logrus level to pino's; pino has no panic, so 0 and 1 are both fatal, and 6 or more is trace. */
export function pinoLevelForLogrus(level: number): Level {
  if (level <= 1) return 'fatal';
  switch (level) {
    case 2:
      return 'error';
    case 3:
      return 'warn';
    case 4:
      return 'info';
    case 5:
      return 'debug';
    default:
      return 'trace';
  }
}

export interface LoggerOptions {
  /** Logrus level as given by `--log-level`. */
  logLevel?: number;
  /** Where JSON lines go; the CLI passes stderr. */
  destination: DestinationStream;
  /** Extra fields on every line (for example the subcommand). */
  base?: Record<string, unknown>;
}

export function createLogger(opts: LoggerOptions): Logger {
  const level = pinoLevelForLogrus(opts.logLevel ?? DEFAULT_LOGRUS_LEVEL);
  return pino(
    {
      level,
      // Stack traces are for developers: only at debug and trace (`--log-level=5` or more).
      serializers: { err: errorSerializer(level === 'debug' || level === 'trace') },
      base: opts.base ?? {},
      timestamp: pino.stdTimeFunctions.isoTime,
      // Level names rather than pino's numbers: what log collectors and people expect to read.
      formatters: { level: (label) => ({ level: label }) },
    },
    opts.destination,
  );
}

/**
 * pino's error serializer (type, message with the causes' messages, own fields such as `code`), with the stack
 * only when asked, and without repeating a cause our message already quotes (`cannot read X: ENOENT...`
 * wrapping the ENOENT error would otherwise say it twice). A value that is not an object (a message passed as
 * `err`) is logged as it is, not spread into one field per character.
 */
function errorSerializer(keepStack: boolean): (err: unknown) => unknown {
  return (err) => {
    if (typeof err !== 'object' || err === null) return err;
    const { stack, ...rest } = pino.stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
    if (err instanceof Error) rest.message = messageWithNewCauses(err);
    return keepStack && stack !== undefined ? { ...rest, stack } : rest;
  };
}

/** `err`'s message followed by each cause's message that the text so far does not already contain. */
export function messageWithNewCauses(err: Error): string {
  let message = err.message;
  const seen = new Set<unknown>([err]);
  for (let cause: unknown = err.cause; cause instanceof Error && !seen.has(cause); cause = cause.cause) {
    seen.add(cause);
    if (cause.message !== '' && !message.includes(cause.message)) message += `: ${cause.message}`;
  }
  return message;
}
