import { createServer } from 'node:net';

/**
 * Asks the kernel for a free loopback port. There is a short window in which another process may take
 * it, so callers that hand the port to a child process retry when the child fails to bind.
 */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      srv.close(() => {
        if (addr && typeof addr === 'object') resolve(addr.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}
