import { EtcdbrError } from '../errors.js';
import { nodeHttp, nodeHttps, type Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { EtcdClient } from '../etcd/index.js';

/** Port of etcd-wrapper's own HTTP server, where `POST /stop` makes it stop etcd (which then restarts). */
export const ETCD_WRAPPER_PORT = 9095;

export interface PeerUrlUpdateOptions {
  /** Client of the local member only (`--endpoints[0]`): the response header names the member to update. */
  client: EtcdClient;
  /** This member's name in the cluster (`[<member-name-prefix>-]POD_NAME`). */
  memberName: string;
  /** This member's `initial-advertise-peer-urls` from the etcd config. */
  configPeerUrls: readonly string[];
  /** `--use-etcd-wrapper`: ask the wrapper to restart etcd after the update. */
  useEtcdWrapper: boolean;
  /** `http(s)://<host of endpoints[0]>:9095/stop` (see `wrapperStopUrl`). */
  wrapperStopUrl: string;
  /** CA for an https stop URL (`--cacert`). */
  wrapperCa?: Buffer;
  timeoutMs: number;
  /** MemberUpdate attempts and the first wait between them (doubling); default 5 and 500 ms. */
  retry?: { attempts: number; delayMs: number };
  clock: Clock;
  logger: Logger;
  signal?: AbortSignal;
}

export type PeerUrlUpdateResult =
  | 'unchanged'
  /** MemberUpdate done, etcd-wrapper asked to restart etcd. */
  | 'updated-restarted'
  /** MemberUpdate done, etcd must be restarted by someone else. */
  | 'updated'
  | 'member-not-found'
  | 'no-config-urls';

/** `<scheme>://<host of the first endpoint>:<port>/stop`; https when the sidecar's own server runs TLS. */
export function wrapperStopUrl(endpoint: string, tls: boolean, port = ETCD_WRAPPER_PORT): string {
  const host = new URL(endpoint.includes('://') ? endpoint : `http://${endpoint}`).hostname;
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return `${tls ? 'https' : 'http'}://${h}:${port}/stop`;
}

/** Scheme and host compare case-insensitively and a trailing `/` does not count, as etcd sees URLs. */
function normalizeUrl(u: string): string {
  try {
    const url = new URL(u.trim());
    return `${url.protocol}//${url.host}${url.pathname === '/' ? '' : url.pathname}`;
  } catch {
    return u.trim();
  }
}

/**
 * Upstream `UpdateMemberPeerURL` (`pkg/member/member_control.go`): when the etcd config advertises a peer URL that the cluster does
 * not have for this member (typically http → https when peer TLS is switched on), MemberUpdate this member
 * to the config's URLs, retrying; then restart etcd through etcd-wrapper, or warn that someone must, since
 * etcd only takes the new URLs on a restart.
 */
export async function updatePeerUrlsIfChanged(opts: PeerUrlUpdateOptions): Promise<PeerUrlUpdateResult> {
  const { client, memberName, logger } = opts;
  if (opts.configPeerUrls.length === 0) {
    logger.warn({ member: memberName }, 'the etcd config has no peer URLs for this member; not checking them');
    return 'no-config-urls';
  }
  const list = await client.memberList({ linearizable: true, timeoutMs: opts.timeoutMs });
  const me = list.members.find((m) => m.name === memberName);
  if (!me) {
    logger.warn({ member: memberName }, 'this member is not in the etcd member list; not checking its peer URLs');
    return 'member-not-found';
  }
  const current = new Set(me.peerUrls.map(normalizeUrl));
  const missing = opts.configPeerUrls.filter((u) => !current.has(normalizeUrl(u)));
  if (missing.length === 0) {
    logger.debug({ member: memberName, peerURLs: me.peerUrls }, 'peer URLs unchanged');
    return 'unchanged';
  }
  // The member that answered is the one --endpoints[0] points at; it must be the one of that name, or we
  // would give another member our URLs.
  if (list.memberId !== me.id) {
    throw new EtcdbrError(
      'E_CONFLICT',
      `the etcd member answering at the first endpoint (${list.memberId}) is not ${memberName} (${me.id}); not updating peer URLs`,
    );
  }
  logger.info({ member: memberName, from: me.peerUrls, to: opts.configPeerUrls }, 'peer URLs changed: updating the etcd member');
  const attempts = opts.retry?.attempts ?? 5;
  let delay = opts.retry?.delayMs ?? 500;
  for (let i = 1; ; i++) {
    try {
      await client.memberUpdate(me.id, opts.configPeerUrls, { timeoutMs: opts.timeoutMs });
      break;
    } catch (err) {
      if (i >= attempts)
        throw new EtcdbrError('E_FAILED', `updating the peer URLs of ${memberName} failed: ${(err as Error).message}`, { cause: err });
      logger.warn({ err, attempt: i }, 'updating the peer URLs failed; retrying');
      await opts.clock.sleep(delay, opts.signal);
      delay *= 2;
    }
  }
  logger.info({ member: memberName, peerURLs: opts.configPeerUrls }, 'updated the peer URLs of the etcd member');
  if (!opts.useEtcdWrapper) {
    logger.warn({ member: memberName }, 'etcd advertises the new peer URLs only after a restart: restart etcd manually');
    return 'updated';
  }
  await postWrapperStop(opts.wrapperStopUrl, opts.wrapperCa, opts.timeoutMs);
  logger.info({ url: opts.wrapperStopUrl }, 'asked etcd-wrapper to restart etcd');
  return 'updated-restarted';
}

/** `POST <url>` with an empty body; any 2xx answer counts as done. */
export function postWrapperStop(url: string, ca: Buffer | undefined, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const options = { method: 'POST', timeout: timeoutMs, headers: { 'content-length': '0' } };
    const req = u.protocol === 'https:' ? nodeHttps().request(u, { ...options, ...(ca ? { ca } : {}) }) : nodeHttp().request(u, options);
    req.on('timeout', () => req.destroy(new EtcdbrError('E_UNAVAILABLE', `no answer from ${url} within ${timeoutMs} ms`)));
    req.on('error', (err) =>
      reject(new EtcdbrError('E_UNAVAILABLE', `asking etcd-wrapper to restart etcd (${url}) failed: ${err.message}`, { cause: err })),
    );
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => {
        const code = res.statusCode ?? 0;
        if (code >= 200 && code < 300) resolve();
        else reject(new EtcdbrError('E_FAILED', `etcd-wrapper answered ${code} to POST ${url}`));
      });
    });
    req.end();
  });
}

/**
 * Waits until the local etcd answers (it may still be initializing when the sidecar starts), then runs the
 * update. Resolves undefined when `signal` aborts first.
 */
export async function updatePeerUrlsWhenReachable(
  opts: PeerUrlUpdateOptions & { pollMs?: number },
): Promise<PeerUrlUpdateResult | undefined> {
  const pollMs = opts.pollMs ?? 2_000;
  for (;;) {
    if (opts.signal?.aborted) return undefined;
    try {
      const status = await opts.client.status({ timeoutMs: opts.timeoutMs });
      if (status.isLearner) {
        // A learner refuses MemberList ("rpc not supported for learner"). It was just added (join or rejoin
        // as learner) with the etcd config's peer URLs, so there is nothing to correct.
        opts.logger.info(
          { member: opts.memberName },
          'this member is a learner, added with the etcd config’s peer URLs: not checking them',
        );
        return 'unchanged';
      }
      break;
    } catch {
      try {
        await opts.clock.sleep(pollMs, opts.signal);
      } catch {
        return undefined;
      }
    }
  }
  return updatePeerUrlsIfChanged(opts);
}
