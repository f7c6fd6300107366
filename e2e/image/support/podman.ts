/**
 * Rootful podman for the image test (`npm run image-test`), on a storage and configuration of its own under
 * node_modules/.cache/image-test, so that it neither reads nor changes what else on the machine uses podman.
 *
 * What works on these machines, and why each setting:
 * - runc: Debian bookworm's crun (1.8) starts no container on a host with cgroups in hybrid mode (v1
 *   controllers beside a v2 mount), as these machines are ("cgroups in hybrid mode not supported"); runc does.
 * - default ulimits nofile=20000:20000, nproc=32768:32768: podman's defaults (nofile 1048576) lie above the
 *   hard limits this machine gives processes, and runc refuses to raise them.
 * - cgroupfs and a file events log: no systemd runs here.
 * - host networking, for builds (apt-get, npm ci reach their mirrors as the host does) and runs (the
 *   containers talk to an etcd on the host's loopback; no bridge or firewall set-up is needed).
 * - `nice`: builds compile and install for minutes on machines whose cores are shared.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
/** Storage, run state, configuration and the base images' inputs of the image test. */
export const IMAGE_TEST_DIR = join(ROOT, '.local', 'image-test');
const CONTAINERS_CONF = join(IMAGE_TEST_DIR, 'containers.conf');

const CONF_TEXT = `# Written by e2e/image/support/podman.ts; see there for why.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`;

/** Global options of every podman call: this test's storage and state only. */
function globalArgs(): string[] {
  return [
    '--root',
    join(IMAGE_TEST_DIR, 'storage'),
    '--runroot',
    join(IMAGE_TEST_DIR, 'run'),
    '--tmpdir',
    join(IMAGE_TEST_DIR, 'tmp'),
    '--storage-driver',
    'overlay',
    '--runtime',
    'runc',
    '--cgroup-manager',
    'cgroupfs',
    '--events-backend',
    'file',
  ];
}

/** Writes the configuration (CONTAINERS_CONF replaces the system's containers.conf for our calls). */
export function preparePodman(): void {
  for (const d of ['storage', 'run', 'tmp']) mkdirSync(join(IMAGE_TEST_DIR, d), { recursive: true });
  writeFileSync(CONTAINERS_CONF, CONF_TEXT);
}

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Written to stdin, then closed. */
  input?: Buffer | string;
  /** A hang fails the caller after this long (the process is killed); default 10 minutes. */
  timeoutMs?: number;
  /** Lines of output as they come (long builds), besides collecting them. */
  onOutput?: (chunk: string) => void;
  /** Lower priority (builds). */
  nice?: boolean;
}

/** Runs `command args` to its end, collecting its output; never throws for a non-zero exit. */
export function run(command: string, args: string[], opts: RunOptions = {}): Promise<Ran> {
  const [file, argv] = opts.nice === true ? ['nice', ['-n', '10', command, ...args]] : [command, args];
  const child = spawn(file, argv, {
    env: { ...process.env, CONTAINERS_CONF },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    opts.onOutput?.(d);
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
    opts.onOutput?.(d);
  });
  child.stdin.end(opts.input);
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 600_000);
  return new Promise<Ran>((resolve, reject) => {
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `podman <args>` on the image test's storage. */
export function podman(args: string[], opts: RunOptions = {}): Promise<Ran> {
  return run('podman', [...globalArgs(), ...args], opts);
}

/** `podman <args>`, failing with the command and its output unless it exits 0; resolves with stdout. */
export async function podmanOk(args: string[], opts: RunOptions = {}): Promise<string> {
  const r = await podman(args, opts);
  if (r.code !== 0) throw new Error(`podman ${args.join(' ')} exited ${r.code}:\n${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Whether an image of that name is in the test's storage. */
export async function imageExists(name: string): Promise<boolean> {
  return (await podman(['image', 'exists', name])).code === 0;
}

/** A label of a local image, undefined when the image or the label is missing. */
export async function imageLabel(name: string, label: string): Promise<string | undefined> {
  const r = await podman(['image', 'inspect', '--format', `{{index .Labels "${label}"}}`, name]);
  if (r.code !== 0) return undefined;
  const v = r.stdout.trim();
  return v === '' || v === '<no value>' ? undefined : v;
}
