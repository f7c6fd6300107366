import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A loopback port that was free a moment ago and has nothing listening now: an unreachable endpoint. */
export async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}
