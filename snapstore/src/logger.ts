/**
 * The subset of pino's logger the snapstore uses. Injected, never global, so the CLI decides
 * where logs go and tests can capture warnings (for example "invalid snapshot skipped").
 */
export interface Logger {
  debug(obj: object | string, msg?: string): void;
  info(obj: object | string, msg?: string): void;
  warn(obj: object | string, msg?: string): void;
  error(obj: object | string, msg?: string): void;
}

export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};
