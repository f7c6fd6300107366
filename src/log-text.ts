/**
 * `--log-format=text`: the logger's JSON lines turned into lines a person reads in a terminal:
 *   2026-11-25T07:25:19.123Z INFO  restore finished revision=385 ms=316
 * JSON stays the default (what log collectors parse, as the Go sidecar's logrus JSON); this is a view of
 * the same fields, so nothing a JSON line says is lost.
 */
import type { DestinationStream } from 'pino';

const LEVEL_WIDTH = 5;

function value(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  if (typeof v === 'object' && v !== null) {
    // An error keeps its message readable; other objects stay JSON.
    const e = v as { message?: unknown; type?: unknown };
    if (typeof e.message === 'string' && typeof e.type === 'string') return JSON.stringify(`${e.type}: ${e.message}`);
    return JSON.stringify(v);
  }
  return String(v);
}

/** One JSON log line as text; a line that is not a JSON object is passed on unchanged. */
export function formatLogLine(line: string): string {
  let rec: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(line);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return line.endsWith('\n') ? line : `${line}\n`;
    rec = parsed as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const { time, level, msg, ...fields } = rec;
  const head = [
    typeof time === 'string' ? time : '',
    String(level ?? '')
      .toUpperCase()
      .padEnd(LEVEL_WIDTH),
    typeof msg === 'string' ? msg : '',
  ];
  const rest = Object.entries(fields).map(([k, v]) => `${k}=${value(v)}`);
  return `${[...head.filter((p) => p !== ''), ...rest].join(' ')}\n`;
}

/** A pino destination that writes each record as text to `out`. */
export function textLogDestination(out: { write(s: string): unknown }): DestinationStream {
  return { write: (line: string) => void out.write(formatLogLine(line)) };
}
