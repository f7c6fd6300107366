import { readFileSync } from 'node:fs';
import https from 'node:https';

/** A client certificate and key, as files (what the PKI helpers in certs.ts write). */
export interface ClientCert {
  certFile: string;
  keyFile: string;
}

/**
 * One https request that trusts `ca` and presents `client` if given (a fresh connection each time, so a
 * refused handshake or a rotated certificate is seen by every request); resolves with the status and body.
 */
export function httpsRequest(
  url: string,
  opts: { method?: string; ca: Buffer | string; client?: ClientCert | undefined; headers?: Record<string, string> },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      url,
      {
        method: opts.method ?? 'GET',
        agent: false,
        headers: opts.headers ?? {},
        ca: opts.ca,
        ...(opts.client ? { cert: readFileSync(opts.client.certFile), key: readFileSync(opts.client.keyFile) } : {}),
      },
      (r) => {
        let body = '';
        r.setEncoding('utf8').on('data', (d: string) => (body += d));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}
