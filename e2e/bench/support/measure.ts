/**
 * Shared by the benches: RSS sampling, medians, tables. Nothing here allocates in proportion to the
 * data measured, so it does not disturb the memory figures it reports.
 */
import { readFile } from 'node:fs/promises';

export const MiB = 1024 * 1024;

export function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

export const round1 = (n: number): number => Math.round(n * 10) / 10;
export const round3 = (n: number): number => Math.round(n * 1000) / 1000;

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export interface Run {
  seconds: number;
  /** CPU seconds of this process (user + system) during the run. */
  cpuSeconds: number;
  /** Highest RSS seen while the run was going (sampled), MiB. */
  peakRssMB: number;
  /** RSS right before the run (after a GC), MiB. */
  baselineRssMB: number;
  /** process.memoryUsage() at the peak sample, MiB: shows whether the V8 heap or buffers grew. */
  atPeak: { heapTotalMB: number; heapUsedMB: number; externalMB: number; arrayBuffersMB: number };
}

/**
 * Runs `fn` while sampling this process's RSS every `intervalMs` (20 ms by default). The baseline is
 * taken after a full GC (with --expose-gc), so garbage of the previous run does not count against this one.
 */
export async function measured<T>(fn: () => Promise<T>, intervalMs = 20): Promise<{ run: Run; value: T }> {
  gc();
  const baseline = process.memoryUsage.rss();
  let peak = baseline;
  let atPeak = process.memoryUsage();
  const timer = setInterval(() => {
    const rss = process.memoryUsage.rss();
    if (rss > peak) {
      peak = rss;
      atPeak = process.memoryUsage(); // the full breakdown walks the heap spaces; only when a new peak is seen
    }
  }, intervalMs);
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let value: T;
  try {
    value = await fn();
  } finally {
    clearInterval(timer);
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  peak = Math.max(peak, process.memoryUsage.rss());
  return {
    value,
    run: {
      seconds,
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
      peakRssMB: round1(peak / MiB),
      baselineRssMB: round1(baseline / MiB),
      atPeak: {
        heapTotalMB: round1(atPeak.heapTotal / MiB),
        heapUsedMB: round1(atPeak.heapUsed / MiB),
        externalMB: round1(atPeak.external / MiB),
        arrayBuffersMB: round1(atPeak.arrayBuffers / MiB),
      },
    },
  };
}

/** Fixed-width table; numbers right-aligned. */
export function table(header: readonly string[], rows: ReadonlyArray<ReadonlyArray<string | number>>): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? String(c) : c)))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[], isHeader: boolean): string =>
    r
      .map((c, i) => {
        const w = widths[i] ?? 0;
        return i === 0 || isHeader ? c.padEnd(w) : c.padStart(w);
      })
      .join('  ');
  const out = [line(cells[0] as string[], true), widths.map((w) => '-'.repeat(w)).join('  ')];
  for (const r of cells.slice(1)) out.push(line(r as string[], false));
  return out.join('\n');
}

export function arg(name: string, fallback: number): number {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  const value = hit === undefined ? fallback : Number(hit.slice(name.length + 3));
  if (!Number.isFinite(value) || value <= 0) throw new Error(`bad --${name}`);
  return value;
}

/** A `--name=0|1` switch (`--check=0` turns a default-on check off). */
export function flag(name: string, fallback: boolean): boolean {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  if (hit === undefined) return fallback;
  const value = hit.slice(name.length + 3);
  if (value !== '0' && value !== '1') throw new Error(`bad --${name}: ${value} (0 or 1)`);
  return value === '1';
}

/** The AWS SDK prints a multi-line warning about Node 20 once; benches do not need it on every run. */
export function quietAwsNodeWarning(): void {
  const original = process.emitWarning.bind(process);
  process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
    const text = typeof warning === 'string' ? warning : warning.message;
    const type = typeof rest[0] === 'string' ? rest[0] : (rest[0] as { type?: string } | undefined)?.type;
    if (type === 'NodeVersionSupportWarning' || /AWS SDK for JavaScript/.test(text)) return;
    (original as (...a: unknown[]) => void)(warning, ...rest);
  }) as typeof process.emitWarning;
}

/** CPU seconds (user + system) another process has used so far, from /proc (Linux); NaN where unreadable. */
export async function processCpuSeconds(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th of the line.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // USER_HZ is 100 on Linux
  } catch {
    return NaN;
  }
}

/**
 * Polls a child process's peak RSS (VmHWM in /proc/<pid>/status) every `intervalMs` until `stop`; `peakKb` is the
 * highest seen so far (the kernel's high-water mark, so a missed poll loses nothing but the last interval).
 */
export function pollPeakRss(pid: number, intervalMs = 25): { readonly peakKb: number; stop(): void } {
  let peakKb = 0;
  const timer = setInterval(() => {
    readFile(`/proc/${pid}/status`, 'utf8')
      .then((st) => {
        const m = /VmHWM:\s+(\d+) kB/.exec(st);
        if (m) peakKb = Math.max(peakKb, Number(m[1]));
      })
      .catch(() => undefined);
  }, intervalMs);
  return {
    get peakKb() {
      return peakKb;
    },
    stop: () => clearInterval(timer),
  };
}
