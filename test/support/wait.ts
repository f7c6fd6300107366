/**
 * The one way tests wait for something another process or an asynchronous component does: poll `probe`
 * until it returns a value (anything but `undefined` or `false`; a rejection counts as "not yet"), or fail
 * naming `what` (and the last rejection, if any). Polling is the event here: the thing waited on lives in etcd,
 * a store, another process or a component that cannot call back into the test.
 *
 * The timeout is a failure bound, never a synchronisation point: a passing test returns as soon as the probe
 * does. `intervalMs` is how often the probe runs (cheap in-process probes can poll faster than 50 ms).
 */
export async function waitFor<T>(
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  what: string,
  timeoutMs = 30_000,
  intervalMs = 50,
): Promise<Exclude<T, false | undefined>> {
  const end = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    let v: T | undefined | false;
    try {
      v = await probe();
    } catch (err) {
      lastError = err;
      v = undefined;
    }
    if (v !== undefined && v !== false) return v as Exclude<T, false | undefined>;
    if (Date.now() > end) {
      const cause = lastError === undefined ? '' : ` (last error: ${lastError instanceof Error ? lastError.message : String(lastError)})`;
      throw new Error(`timed out waiting for ${what}${cause}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
