/**
 * Calls on the transport with etcd's authentication, as etcd's clientv3 does it: Auth/Authenticate with the
 * user's name and password gives a token that every call carries in its `token` header; a unary call refused
 * because the token is invalid or expired authenticates again once and is retried. Without credentials the
 * calls go out as they are.
 */
import { EtcdError, isEtcdError } from './errors.js';
import type { CallSettings, GrpcCall, GrpcMethod, Transport } from './grpc.js';
import { Auth } from './methods.js';

export interface Credentials {
  username: string;
  password: string;
}

/** etcd's answers to a stale or unknown token (etcdserver/api/v3rpc/rpctypes). */
export const TOKEN_REFUSED = /invalid auth token|auth token is expired|auth: revision in header is old/i;

export class AuthenticatedCalls {
  private token: Promise<string> | undefined;

  constructor(
    readonly transport: Transport,
    private readonly credentials?: Credentials,
  ) {}

  /** Forgets the token (a stream refused it); the next call authenticates again. */
  forgetToken(): void {
    this.token = undefined;
  }

  async unary<I, O>(method: GrpcMethod<I, O>, request: I, settings: CallSettings = {}): Promise<O> {
    if (!this.credentials) return this.transport.unary(method, request, settings);
    try {
      return await this.transport.unary(method, request, { ...settings, metadata: await this.metadata(settings) });
    } catch (err) {
      if (!isEtcdError(err) || !TOKEN_REFUSED.test(err.message)) throw err;
      return this.transport.unary(method, request, { ...settings, metadata: await this.metadata(settings, true) });
    }
  }

  async open<I, O>(method: GrpcMethod<I, O>, onMessage: (message: O) => void, settings: CallSettings = {}): Promise<GrpcCall<I>> {
    const metadata = this.credentials ? await this.metadata(settings) : undefined;
    return this.transport.open(method, onMessage, metadata ? { ...settings, metadata } : settings);
  }

  /** The token header, authenticating first when there is no token (or `renew`). */
  private async metadata(settings: CallSettings, renew = false): Promise<Record<string, string>> {
    const { username, password } = this.credentials!;
    if (renew) this.token = undefined;
    this.token ??= this.transport
      .unary(Auth.authenticate, { name: username, password }, { timeoutMs: settings.timeoutMs, signal: settings.signal })
      .then((res) => res.token ?? '')
      .catch((err: unknown) => {
        this.token = undefined;
        throw isEtcdError(err) && /authentication failed/i.test(err.message)
          ? new EtcdError('E_ETCD_AUTH', err.message, { cause: err })
          : err;
      });
    return { token: await this.token };
  }
}
