/**
 * The status `/healthz` answers with (upstream `HTTPHandler.status`): 503 until the leading sidecar's
 * snapshotter is up and its etcd answers, 503 again on probe failure or lost leadership. Followers stay 503.
 */
export class HealthState {
  #status = 503;

  /** The HTTP status `/healthz` answers with: 200 or 503. */
  get status(): number {
    return this.#status;
  }

  get healthy(): boolean {
    return this.#status === 200;
  }

  setHealthy(healthy: boolean): void {
    this.#status = healthy ? 200 : 503;
  }
}
