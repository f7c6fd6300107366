import type { Logger } from '@etcdbrctl/snapstore';

export type InitializationStatus = 'New' | 'Progress' | 'Successful' | 'Failed';
export type ValidationMode = 'full' | 'sanity';

/**
 * The etcd-wrapper handshake state (upstream `pkg/server/httpAPI.go`): `New` until `/initialization/start`, then `Progress`,
 * then `Successful` or `Failed`. Reading a final state resets it to `New` (read-once), which is how the
 * wrapper re-triggers a failed initialization.
 */
export class InitializationState {
  private status: InitializationStatus = 'New';

  constructor(
    private readonly run: (mode: ValidationMode) => Promise<void>,
    private readonly logger: Logger,
    private readonly onStart: () => void = () => {},
  ) {}

  /** Starts initialization when New; ignored otherwise (upstream answers 200 either way). */
  start(mode: ValidationMode): void {
    if (this.status !== 'New') return;
    this.status = 'Progress';
    this.onStart();
    this.logger.info({ mode }, 'initialization started');
    void this.run(mode).then(
      () => {
        this.status = 'Successful';
        this.logger.info({ mode }, 'initialization succeeded');
      },
      (err: unknown) => {
        this.status = 'Failed';
        this.logger.error({ err, mode }, 'initialization failed');
      },
    );
  }

  /** The current status; a final one is reported once and then reset to New. */
  read(): InitializationStatus {
    const s = this.status;
    if (s === 'Successful' || s === 'Failed') this.status = 'New';
    return s;
  }

  peek(): InitializationStatus {
    return this.status;
  }
}
