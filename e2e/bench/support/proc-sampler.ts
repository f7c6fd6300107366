/**
 * Samples another process's memory and CPU from /proc (Linux), for benches that measure a spawned
 * `etcdbrctl` (ours or the Go tool) from outside: what a pod's container would show, with no probe inside
 * the measured process. The parsers are pure; `ProcSampler` reads both files every `intervalMs`.
 */
import { readFileSync } from 'node:fs';

/** Clock ticks per second of /proc/PID/stat's times: USER_HZ, 100 on every Linux architecture in use. */
export const USER_HZ = 100;

/** VmRSS of /proc/PID/status in KiB; undefined when the line is missing (a zombie has none). */
export function parseVmRssKiB(status: string): number | undefined {
  const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  return m ? Number(m[1]) : undefined;
}

/**
 * utime + stime of /proc/PID/stat in clock ticks. The command name (field 2) is in parentheses and may
 * hold spaces and parentheses itself, so fields are counted after the last ')'.
 */
export function parseCpuTicks(stat: string): number | undefined {
  const close = stat.lastIndexOf(')');
  if (close < 0) return undefined;
  // After ") ": state is field 3, so utime (14) and stime (15) are the 12th and 13th from there.
  const fields = stat.slice(close + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return Number.isFinite(utime) && Number.isFinite(stime) ? utime + stime : undefined;
}

export interface ProcSample {
  /** ms since the sampler started. */
  t: number;
  rssKiB: number;
  cpuTicks: number;
}

export interface WindowFigures {
  /** Highest RSS sampled in the window, MiB. */
  peakMiB: number;
  /** The window's last RSS sample, MiB. */
  lastMiB: number;
  /** CPU time the process used between the window's first and last samples, seconds. */
  cpuSeconds: number;
  /** Wall time between those samples, seconds. */
  seconds: number;
}

/** The figures of the samples with `from <= t <= to`; NaN everywhere when there are none. */
export function windowFigures(samples: readonly ProcSample[], from: number, to: number): WindowFigures {
  let first: ProcSample | undefined;
  let last: ProcSample | undefined;
  let peak = 0;
  for (const s of samples) {
    if (s.t < from || s.t > to) continue;
    first ??= s;
    last = s;
    if (s.rssKiB > peak) peak = s.rssKiB;
  }
  if (!first || !last) return { peakMiB: NaN, lastMiB: NaN, cpuSeconds: NaN, seconds: NaN };
  return {
    peakMiB: peak / 1024,
    lastMiB: last.rssKiB / 1024,
    cpuSeconds: (last.cpuTicks - first.cpuTicks) / USER_HZ,
    seconds: (last.t - first.t) / 1000,
  };
}

/**
 * Reads /proc/PID/status and /proc/PID/stat every `intervalMs` until stopped or the process is gone.
 * Samples are kept (a few bytes each: 10 minutes at 50 ms is 12,000), so any window can be asked for later.
 */
export class ProcSampler {
  readonly samples: ProcSample[] = [];
  private readonly started = performance.now();
  private readonly timer: NodeJS.Timeout;

  constructor(
    readonly pid: number,
    intervalMs = 50,
  ) {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  /** ms since the sampler started: the clock the samples are on. */
  now(): number {
    return performance.now() - this.started;
  }

  /** Takes one sample now (also on a timer); false once the process is gone. */
  sample(): boolean {
    try {
      const rssKiB = parseVmRssKiB(readFileSync(`/proc/${this.pid}/status`, 'utf8'));
      const cpuTicks = parseCpuTicks(readFileSync(`/proc/${this.pid}/stat`, 'utf8'));
      if (rssKiB === undefined || cpuTicks === undefined) return false;
      this.samples.push({ t: this.now(), rssKiB, cpuTicks });
      return true;
    } catch {
      return false;
    }
  }

  window(from: number, to = this.now()): WindowFigures {
    return windowFigures(this.samples, from, to);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
