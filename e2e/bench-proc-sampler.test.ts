/**
 * The footprint bench's /proc sampler (e2e/bench/support/proc-sampler.ts): its parsers on the kernel's
 * own text and on a command name built to mislead, and the sampler on a real child that grows and spins.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cleanupAfterEach } from '../test/support/cleanups.js';
import { waitFor } from '../test/support/wait.js';
import { ProcSampler, parseCpuTicks, parseVmRssKiB, windowFigures } from './bench/support/proc-sampler.js';

const cleanups = cleanupAfterEach();

describe('proc sampler', () => {
  it('reads VmRSS and utime + stime as the kernel writes them', () => {
    const rss = parseVmRssKiB(readFileSync('/proc/self/status', 'utf8'));
    expect(rss! * 1024).toBeGreaterThan(process.memoryUsage.rss() / 2);
    expect(rss! * 1024).toBeLessThan(process.memoryUsage.rss() * 2);
    expect(parseVmRssKiB('Name:\tx\nState:\tZ (zombie)\n')).toBeUndefined();
    // A command name with spaces and a ')' of its own: fields count from the last ')'.
    const stat = '4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 1 0 100 1000 10';
    expect(parseCpuTicks(stat)).toBe(1234 + 567);
    expect(parseCpuTicks('garbage')).toBeUndefined();
  });

  it('a window gives its peak, last sample and CPU between its ends', () => {
    const samples = [
      { t: 0, rssKiB: 1024, cpuTicks: 10 },
      { t: 100, rssKiB: 4096, cpuTicks: 20 },
      { t: 200, rssKiB: 2048, cpuTicks: 60 },
      { t: 300, rssKiB: 8192, cpuTicks: 90 },
    ];
    expect(windowFigures(samples, 50, 250)).toEqual({ peakMiB: 4, lastMiB: 2, cpuSeconds: 0.4, seconds: 0.1 });
    expect(windowFigures(samples, 400, 500).peakMiB).toBeNaN();
  });

  it('sees a child grow by what it allocates and the CPU it burns', async () => {
    // Holds 64 MiB of touched memory while burning 400 ms of its own CPU time (CPU time, not wall time: on
    // busy cores a wall-clock spin may get a fraction of that), then waits to be killed.
    const code =
      'const b = Buffer.alloc(64 * 1024 * 1024, 1); while (process.cpuUsage().user < 400_000); ' +
      'process.stdout.write("done " + b[5]); setInterval(() => {}, 1000);';
    const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(async () => child.kill('SIGKILL'));
    const sampler = new ProcSampler(child.pid!, 20);
    cleanups.push(async () => sampler.stop());
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await waitFor(() => out.startsWith('done'), 'the child to allocate and spin');
    sampler.sample();
    const w = sampler.window(0);
    expect(w.peakMiB).toBeGreaterThan(64);
    expect(w.cpuSeconds).toBeGreaterThanOrEqual(0.3);
    child.kill('SIGKILL');
    await waitFor(() => child.exitCode !== null || child.signalCode !== null, 'the child to exit');
    await waitFor(() => !sampler.sample(), 'the sampler to see the child gone');
  });
});
