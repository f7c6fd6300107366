import type { Logger } from '@etcdbrctl/snapstore';

export interface LogLine {
  level: string;
  msg: string;
}

/** A logger that keeps the level and message of every line for assertions. */
export function recordingLogger(): Logger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at = (level: string) => (obj: object | string, msg?: string) => {
    lines.push({ level, msg: typeof obj === 'string' ? obj : (msg ?? '') });
  };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
