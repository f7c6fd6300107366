import { spawn } from 'node:child_process';
import path from 'node:path';

export interface FillResult {
  keys: number;
  bytes: number;
  seconds: number;
}

/**
 * Fills the etcd at `endpoint` with about `mb` MiB of kube-like values by running support/fill-etcd.ts in
 * its own process and heap, so the measuring process never held them. Always through tsx, whether the
 * calling bench runs from TypeScript or bundled; `benchDir` is the bench's directory (ETCDBR_BENCH_DIR
 * when bundled).
 */
export function fillEtcd(benchDir: string, endpoint: string, mb: number): Promise<FillResult> {
  const script = path.join(benchDir, 'support', 'fill-etcd.ts');
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--conditions=development', '--import', 'tsx', script, `--endpoint=${endpoint}`, `--mb=${mb}`], {
      cwd: path.resolve(benchDir, '..', '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`filling etcd failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as FillResult);
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}
