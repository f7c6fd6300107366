/**
 * The processes a soak runs (etcd members, sidecars, the workload), each restartable, its output appended to a
 * log file of its own, and every exit recorded with whether the nemesis (or the soak's own shutdown) asked for
 * it: an exit nobody asked for is a crash, which the checker reports.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

export interface ExitRecord {
  name: string;
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The signal we sent, if this exit was ours (nemesis or shutdown). */
  requested?: NodeJS.Signals;
  at: number;
}

/** Every process a soak started, for the exit hook and the final sweep. */
const running = new Set<ChildProcess>();
let hooked = false;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const c of running) c.kill('SIGKILL');
  });
}

export class ManagedProcess {
  private child: ChildProcess | undefined;
  private exitedPromise: Promise<ExitRecord> | undefined;
  private requested: NodeJS.Signals | undefined;
  private readonly log: WriteStream;

  constructor(
    readonly name: string,
    private readonly command: string,
    private readonly args: () => string[],
    logPath: string,
    private readonly exits: ExitRecord[],
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    this.log = createWriteStream(logPath, { flags: 'a' });
  }

  get pid(): number | undefined {
    return this.running ? this.child?.pid : undefined;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  start(): void {
    if (this.running) return;
    hookExit();
    this.requested = undefined;
    this.log.write(`\n===== start ${new Date().toISOString()} ${this.command} ${this.args().join(' ')}\n`);
    const child = spawn(this.command, this.args(), { stdio: ['ignore', 'pipe', 'pipe'], env: this.env });
    this.child = child;
    running.add(child);
    child.stdout?.on('data', (d: Buffer) => this.log.write(d));
    child.stderr?.on('data', (d: Buffer) => this.log.write(d));
    this.exitedPromise = new Promise((resolve) => {
      const done = (code: number | null, signal: NodeJS.Signals | null) => {
        running.delete(child);
        const rec: ExitRecord = { name: this.name, pid: child.pid ?? -1, code, signal, at: Date.now() };
        if (this.requested) rec.requested = this.requested;
        this.exits.push(rec);
        this.log.write(`===== exit code=${code} signal=${signal} requested=${this.requested ?? 'no'}\n`);
        resolve(rec);
      };
      child.once('exit', done);
      child.once('error', () => done(-1, null));
    });
  }

  /** Sends `signal` (recorded as ours) and waits for the exit; SIGKILL after `graceMs` if it lingers. */
  async kill(signal: NodeJS.Signals, graceMs = 60_000): Promise<ExitRecord | undefined> {
    if (!this.running || !this.child) return undefined;
    this.requested = signal;
    this.child.kill(signal);
    const timer = setTimeout(() => {
      this.requested = 'SIGKILL';
      this.child?.kill('SIGKILL');
    }, graceMs);
    const rec = await this.exitedPromise!;
    clearTimeout(timer);
    return rec;
  }

  /** Resolves when the current process exits (immediately when none runs). */
  async exited(): Promise<void> {
    if (this.running) await this.exitedPromise;
  }

  async close(): Promise<void> {
    await this.kill('SIGKILL');
    await new Promise<void>((resolve) => this.log.end(() => resolve()));
  }
}
