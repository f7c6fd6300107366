/**
 * Azurite (the Azure Storage emulator, npm devDependency) as a child process for tests: blob service
 * only, on a free loopback port, with its data in a fresh temp dir that is removed on stop.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ContainerClient, StorageSharedKeyCredential } from '@azure/storage-blob';

/** Azurite's built-in development account and its published key. */
export const AZURITE_ACCOUNT = 'devstoreaccount1';
export const AZURITE_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export interface Azurite {
  /** e.g. `http://127.0.0.1:41234` */
  origin: string;
  /** Path-style account endpoint, what `--store-endpoint-override` is set to: `<origin>/devstoreaccount1`. */
  accountEndpoint: string;
  /** A container client for the dev account, for setup and raw inspection. */
  containerClient(container: string): ContainerClient;
  /** Creates a container (ignores "already exists"). */
  createContainer(container: string): Promise<void>;
  stop(): Promise<void>;
}

const STARTUP_TIMEOUT_MS = 30_000;

function azuriteBlobMain(): string {
  const require = createRequire(import.meta.url);
  // The package's `main` is the combined launcher; the blob-only entry sits next to it.
  const pkg = require.resolve('azurite/package.json');
  return join(dirname(pkg), 'dist', 'src', 'blob', 'main.js');
}

export async function startAzurite(): Promise<Azurite> {
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-azurite-'));
  let child: ChildProcess | undefined;
  try {
    child = spawn(
      process.execPath,
      [
        // Azurite does not exit when its parent dies; the IPC channel closing tells it to.
        '--import',
        'data:text/javascript,process.on("disconnect",()=>process.exit(0))',
        azuriteBlobMain(),
        '--blobHost',
        '127.0.0.1',
        '--blobPort',
        '0',
        '--location',
        dir,
        '--skipApiVersionCheck',
        '--disableTelemetry',
        '--silent',
      ],
      { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], cwd: dir },
    );
    const origin = await waitForListening(child);
    const proc = child;
    const credential = new StorageSharedKeyCredential(AZURITE_ACCOUNT, AZURITE_KEY);
    const accountEndpoint = `${origin}/${AZURITE_ACCOUNT}`;
    const containerClient = (container: string): ContainerClient =>
      new ContainerClient(`${accountEndpoint}/${container}`, credential, { retryOptions: { maxTries: 1 } });
    return {
      origin,
      accountEndpoint,
      containerClient,
      async createContainer(container) {
        await containerClient(container).createIfNotExists();
      },
      async stop() {
        await stopChild(proc);
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    if (child) await stopChild(child);
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Azurite prints the bound address once it listens; port 0 makes the OS pick a free one. */
function waitForListening(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(
      () => fail(new Error(`azurite did not start within ${STARTUP_TIMEOUT_MS} ms: ${out}${err}`)),
      STARTUP_TIMEOUT_MS,
    );
    const fail = (e: Error): void => {
      clearTimeout(timer);
      reject(e);
    };
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listens on (http:\/\/[^\s]+)/.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      err += d;
    });
    child.once('error', fail);
    child.once('exit', (code, signal) => fail(new Error(`azurite exited early (${code ?? signal}): ${out}${err}`)));
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Closing the IPC channel makes the preloaded handler exit at once (SIGTERM alone leaves the
  // channel holding the event loop open).
  if (child.connected) child.disconnect();
  else child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
