import { EtcdbrError } from '../errors.js';
import {
  credentialsModifiedTime,
  openSnapStore,
  type CredentialEnv,
  type CredentialEnvPrefix,
  type Logger,
  type SnapStore,
  type StoreConfig,
} from '@etcdbrctl/snapstore';

/**
 * Hands out the open store and re-opens it when the credential files changed (upstream re-creates the
 * store before each snapshot when the newest credential file mtime moved). The first call opens it.
 */
export class RotatingStore {
  private store: SnapStore | undefined;
  private seen: number | undefined;
  private pending: Promise<SnapStore> | undefined;

  constructor(
    private readonly opts: {
      /** Resolves the config again, re-reading credential files. */
      resolve: () => Promise<StoreConfig | undefined>;
      env: CredentialEnv;
      envPrefix: CredentialEnvPrefix;
      logger: Logger;
      /** This process is the only one writing as this name (OpenOptions.tempOwner): the sidecar's member. */
      tempOwner?: string;
    },
  ) {}

  async get(): Promise<SnapStore> {
    // Callers in parallel (snapshotter, GC, secondary sync) share one check: two parallel opens would
    // each close the store the other had just handed out.
    this.pending ??= this.refresh().finally(() => {
      this.pending = undefined;
    });
    return this.pending;
  }

  private async refresh(): Promise<SnapStore> {
    if (this.store && (await this.credentialsMtime(this.store.provider)) === this.seen) return this.store;
    const config = await this.opts.resolve();
    if (!config) throw new EtcdbrError('E_INVALID_INPUT', 'no storage provider configured');
    const seen = await this.credentialsMtime(config.provider);
    const fresh = await openSnapStore(config, this.opts.tempOwner === undefined ? {} : { tempOwner: this.opts.tempOwner });
    if (this.store) {
      this.opts.logger.info({ provider: config.provider }, 'snapstore credentials changed; re-created the store client');
      await this.store.close().catch(() => undefined);
    }
    this.store = fresh;
    this.seen = seen;
    return fresh;
  }

  /** The store opened last, without checking credentials (for synchronous readers). */
  peek(): SnapStore | undefined {
    return this.store;
  }

  async close(): Promise<void> {
    await this.store?.close();
    this.store = undefined;
  }

  private async credentialsMtime(provider: string): Promise<number | undefined> {
    const t = await credentialsModifiedTime(provider, this.opts.env, this.opts.envPrefix);
    return t?.getTime();
  }
}
