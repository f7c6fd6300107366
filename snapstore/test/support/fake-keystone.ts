/**
 * A fake of Keystone's documented Identity v3 token API (Keystone itself needs a database, a WSGI server
 * and fernet keys; Debian's package would also start services) plus the part of Swift's keystoneauth
 * middleware that matters to a client: a token-checking gateway in front of a real Swift proxy that
 * answers 401 to a missing, unknown or expired token and forwards everything else unchanged.
 *
 * Token API (Identity API v3, "Authentication and token management"): `POST /v3/auth/tokens` with the
 * password method scoped to a project, or the application_credential method; 201 with `X-Subject-Token`
 * and `{token: {expires_at, catalog}}`; 401 for wrong credentials.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeKeystoneUser {
  domain: string;
  project: string;
  username: string;
  password: string;
  /** Application credential of this user, scoped to its project. */
  applicationCredential?: { id: string; name: string; secret: string };
}

export interface GatewayRequest {
  method: string;
  url: string;
  status: number;
}

export interface FakeKeystone {
  /** `http://127.0.0.1:<port>/v3` */
  authURL: string;
  /** The object-store URL in the catalog: `<gateway>/v1/AUTH_<project>` (the gateway forwards to Swift). */
  storageUrl: string;
  /** Successful token requests so far. */
  issued: number;
  /** Requests through the gateway (method, path, status). */
  requests: GatewayRequest[];
  /** Invalidates every token issued so far, as their expiry would. */
  expireTokens(): void;
  /** Invalidates tokens once `predicate` matches a gateway request (it is answered 401). */
  expireTokensOn(predicate: (method: string, url: string) => boolean): void;
  /**
   * A password change: from now on only `password` authenticates the user, and every token issued so far
   * is revoked (Keystone revokes a user's tokens when the password changes).
   */
  changePassword(password: string): void;
  stop(): Promise<void>;
}

async function listen(server: http.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

export async function startFakeKeystone(opts: { swiftProxy: string; user: FakeKeystoneUser; region?: string }): Promise<FakeKeystone> {
  // A copy: changePassword changes what this Keystone accepts, not the caller's object.
  const user = { ...opts.user };
  const region = opts.region ?? 'RegionOne';
  const valid = new Set<string>();
  const target = new URL(opts.swiftProxy);
  let expireOn: ((method: string, url: string) => boolean) | undefined;

  const gateway = http.createServer((req, res) => {
    const method = req.method ?? '';
    const url = req.url ?? '';
    const rec: GatewayRequest = { method, url, status: 0 };
    state.requests.push(rec);
    if (expireOn?.(method, url)) {
      expireOn = undefined;
      valid.clear();
    }
    const token = req.headers['x-auth-token'];
    if (typeof token !== 'string' || !valid.has(token)) {
      rec.status = 401;
      req.resume();
      res.writeHead(401, { 'content-type': 'text/plain' }).end('Authentication required');
      return;
    }
    const up = http.request({ host: target.hostname, port: target.port, method, path: url, headers: req.headers }, (upRes) => {
      rec.status = upRes.statusCode ?? 502;
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      // Headers go on at once, as a real gateway's do, not with the first byte of the body.
      res.flushHeaders();
      upRes.pipe(res);
    });
    up.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    req.on('error', () => up.destroy());
    req.pipe(up);
  });
  const gatewayPort = await listen(gateway);
  const storageUrl = `http://127.0.0.1:${gatewayPort}/v1/AUTH_${user.project}`;

  const identity = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => (body += d));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v3/auth/tokens') {
        res.writeHead(404).end();
        return;
      }
      let ok = false;
      try {
        const auth = (JSON.parse(body) as { auth: Record<string, any> }).auth;
        const id = auth['identity'];
        if (id.methods?.[0] === 'password') {
          const u = id.password.user;
          const p = auth['scope']?.project;
          ok =
            u.name === user.username &&
            u.password === user.password &&
            u.domain?.name === user.domain &&
            p?.name === user.project &&
            p?.domain?.name === user.domain;
        } else if (id.methods?.[0] === 'application_credential') {
          const ac = id.application_credential;
          // Application credentials carry their scope; a request that adds one is refused by Keystone.
          ok =
            user.applicationCredential !== undefined &&
            ac.id === user.applicationCredential.id &&
            ac.secret === user.applicationCredential.secret &&
            auth['scope'] === undefined;
        }
      } catch {
        ok = false;
      }
      if (!ok) {
        res
          .writeHead(401, { 'content-type': 'application/json' })
          .end(
            JSON.stringify({ error: { code: 401, message: 'The request you have made requires authentication.', title: 'Unauthorized' } }),
          );
        return;
      }
      const token = randomBytes(16).toString('hex');
      valid.add(token);
      state.issued++;
      const endpoint = (iface: string) => ({ id: `${iface}-ep`, interface: iface, region, region_id: region, url: storageUrl });
      res.writeHead(201, { 'content-type': 'application/json', 'x-subject-token': token }).end(
        JSON.stringify({
          token: {
            methods: ['password'],
            expires_at: new Date(Date.now() + 3_600_000).toISOString(),
            project: { name: user.project, domain: { name: user.domain } },
            catalog: [
              { type: 'identity', name: 'keystone', endpoints: [{ interface: 'public', region, url: 'http://127.0.0.1/identity' }] },
              { type: 'object-store', name: 'swift', endpoints: [endpoint('public'), endpoint('internal'), endpoint('admin')] },
            ],
          },
        }),
      );
    });
  });
  const identityPort = await listen(identity);

  const state: FakeKeystone = {
    authURL: `http://127.0.0.1:${identityPort}/v3`,
    storageUrl,
    issued: 0,
    requests: [],
    expireTokens: () => valid.clear(),
    expireTokensOn: (p) => {
      expireOn = p;
    },
    changePassword(password) {
      user.password = password;
      valid.clear();
    },
    async stop() {
      for (const s of [gateway, identity]) {
        s.closeAllConnections();
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
    },
  };
  return state;
}
