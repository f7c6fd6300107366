/**
 * The one way tests wait for something another process or an asynchronous component does: poll `probe`
 * until it returns a value (not undefined; a rejection counts as "not yet"), or fail naming `what`.
 * Polling is the event here: the thing waited on lives in etcd, a store or another process, which cannot
 * call back into the test.
 */
export async function waitFor<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
