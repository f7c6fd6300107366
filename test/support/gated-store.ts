import type { SnapStore } from '@etcdbrctl/snapstore';

/** A store whose next save of one kind waits, before it starts, until the test releases it. */
export interface GatedStore {
  store: SnapStore;
  /**
   * Holds the next save of a `kind` snapshot: resolves once that save has begun (and is waiting); `release`
   * lets it go on to the real store.
   */
  holdNext(kind: 'Full' | 'Incr'): { reached: Promise<void>; release: () => void };
}

/**
 * `store` with a gate in front of `save` (every other call goes straight through), so a test can make writes
 * land while the snapshotter is between two store writes. The objects are the real store's.
 */
export function gatedStore(store: SnapStore): GatedStore {
  let hold: { kind: 'Full' | 'Incr'; reached: () => void; release: Promise<void> } | undefined;
  const gated = new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'save') return Reflect.get(target, prop, receiver) as unknown;
      return async (...args: Parameters<SnapStore['save']>) => {
        const h = hold?.kind === args[0].kind ? hold : undefined;
        if (h) {
          hold = undefined;
          h.reached();
          await h.release;
        }
        return target.save(...args);
      };
    },
  });
  return {
    store: gated,
    holdNext(kind) {
      let release!: () => void;
      let reached!: () => void;
      const reachedP = new Promise<void>((resolve) => (reached = resolve));
      hold = { kind, reached, release: new Promise<void>((resolve) => (release = resolve)) };
      return { reached: reachedP, release };
    },
  };
}
