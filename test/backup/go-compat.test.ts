/**
 * What we WRITE must be what the Go implementation restores. A small Go program (test/backup/go/ebrcheck,
 * stdlib only) reads our delta and full snapshot objects exactly as upstream's restorer does: decompress
 * by name suffix, check length and sha256 trailer, json.Unmarshal into upstream's event type, and dumps
 * every field. The dump must equal the events etcd itself reported, field for field (lease IDs above 2^53
 * included), and json.Marshal of what Go decoded must reproduce our JSON byte for byte. Upstream's own
 * fixture stores go through the same program as a control.
 */
import { createReadStream } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDecompressStream, type CompressionPolicy, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { Metrics } from '../../src/metrics.js';
import { buildGoProgram, type GoProgram } from '../../snapstore/test/support/go.js';
import { readDeltaEvents } from '../support/deltas.js';
import { startEtcdWithClient, type EtcdWithClient } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';
import { waitFor } from '../support/wait.js';
import { FakeClock } from '../../src/clock.js';

const GO_DIR = fileURLToPath(new URL('./go/', import.meta.url));
const FIXTURES = UPSTREAM_V023;
const FIXTURE_CASES = ['none', 'gzip', 'lzw', 'zlib', 'compacted-gzip', 'two-fulls-gzip', 'final-gzip'];

/** One decoded delta file as ebrcheck prints it. */
interface GoDelta {
  name: string;
  events: number;
  jsonBytes: number;
  remarshal: string;
  /** Our `"leaseTTL"` fields in the file (which Go ignores). */
  leaseTtls: number;
  lines: string[];
}

function parseDeltaDump(out: string): GoDelta[] {
  const files: GoDelta[] = [];
  for (const line of out.split('\n')) {
    if (line.startsWith('F ')) {
      const [, name = '', events = '', jsonBytes = '', remarshal = '', leaseTtls = ''] = line.split(' ');
      files.push({ name, events: Number(events), jsonBytes: Number(jsonBytes), remarshal, leaseTtls: Number(leaseTtls), lines: [] });
    } else if (line.startsWith('E ')) {
      files.at(-1)!.lines.push(line.slice(2));
    }
  }
  return files;
}

const hexOrDash = (b: Buffer) => (b.length === 0 ? '-' : b.toString('hex'));

/** Our parser's view of an event, in ebrcheck's line format (time verbatim from the file). */
function ourLine(e: DeltaEvent): string {
  return [
    e.type === 'DELETE' ? 1 : 0,
    hexOrDash(e.key),
    hexOrDash(e.value),
    e.createRevision,
    e.modRevision,
    e.version,
    e.lease,
    e.time,
  ].join(' ');
}

interface RawWatchKv {
  key: Buffer;
  value: Buffer;
  create_revision: string;
  mod_revision: string;
  version: string;
  lease: string;
}

/** etcd's own report of an event (etcd3 decodes int64 as decimal strings, so nothing is rounded). */
function etcdLine(type: 'Put' | 'Delete', kv: RawWatchKv): string {
  return [
    type === 'Delete' ? 1 : 0,
    hexOrDash(kv.key),
    hexOrDash(kv.value ?? Buffer.alloc(0)),
    kv.create_revision,
    kv.mod_revision,
    kv.version,
    kv.lease,
  ].join(' ');
}

/** Drops the trailing time field of a dump line. */
const withoutTime = (line: string) => line.slice(0, line.lastIndexOf(' '));

async function readOurFile(path: string, name: string, suffix: string): Promise<DeltaEvent[]> {
  const events: DeltaEvent[] = [];
  const parser = new DeltaPayloadParser(name);
  parser.on('data', (e: DeltaEvent) => events.push(e));
  await pipeline(createReadStream(path), createDecompressStream(suffix, name), parser);
  return events;
}

/** Copies a stored object to `<dir>/<snapName>`, so Go sees the name (its suffix picks the codec). */
async function exportObject(store: SnapStore, snap: Snapshot, dir: string): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of await store.fetch(snap)) chunks.push(c as Buffer);
  const path = join(dir, snap.snapName);
  await writeFile(path, Buffer.concat(chunks));
  return path;
}

let go: GoProgram;
beforeAll(async () => {
  go = await buildGoProgram('ebrcheck', GO_DIR);
}, 180_000);
afterAll(async () => {
  await go?.cleanup();
});

describe('Go restorer reads the deltas and fulls we write', () => {
  const POLICIES: Array<CompressionPolicy | undefined> = ['gzip', 'zlib', 'lzw', undefined];
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let dir: string;
  const stores: SnapStore[] = [];

  beforeAll(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-go-compat-');
    ({ client, dir } = etcdEnv);
  });

  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await etcdEnv?.cleanup();
  });

  it('every event of a varied workload, under gzip, zlib, lzw and no compression', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    // The delta period (1 s) passes when the test advances this clock.
    const clock = new FakeClock(Date.now());
    const runs = await Promise.all(
      POLICIES.map(async (policy) => {
        const name = policy ?? 'none';
        const store = await openLocalStore(join(dir, name), dir);
        stores.push(store);
        const snapshotter = await createTestSnapshotter(
          { client, store, metrics, clock },
          // Low enough that the 500 KiB value cuts a delta by memory, not by the timer.
          { deltaSnapshotMemoryLimit: 256 * 1024, compression: policy, finalDeltaTimeoutMs: 10_000 },
        );
        const stop = new AbortController();
        const running = snapshotter.run(stop.signal, true);
        return { name, policy, store, snapshotter, stop, running };
      }),
    );
    await waitFor(() => runs.every((r) => r.snapshotter.chain.prevFull !== undefined), 'the first full snapshots');
    const fullRev = runs[0]!.snapshotter.chain.prevFull!.lastRevision;
    for (const r of runs) expect(r.snapshotter.chain.prevFull!.lastRevision).toBe(fullRev);

    // The workload: plain puts, overwrites, deletes, a multi-op txn, binary keys, empty values, a large
    // value, leases with IDs above 2^53 (one chosen, one etcd's own) and a revoke deleting two keys.
    const bigLease = '8070450532247928833'; // odd and > 2^53: a double cannot hold it
    await client.leaseClient.leaseGrant({ TTL: 3600, ID: bigLease });
    const etcdLease = (await client.leaseClient.leaseGrant({ TTL: 3600 })).ID;
    for (let i = 0; i < 15; i++) await client.put(`/registry/pods/default/pod-${i}`).value(JSON.stringify({ i, spec: 'x'.repeat(i * 10) }));
    for (let i = 0; i < 5; i++) await client.put('/registry/configmaps/default/cm').value(`version ${i}`);
    await client.delete().key('/registry/pods/default/pod-3');
    await client.delete().key('/registry/pods/default/pod-4');
    const txn = await client
      .if('/registry/pods/default/pod-0', 'Create', '>', 0)
      .then(
        client.put('/registry/txn/a').value('A'),
        client.put('/registry/txn/b').value('B'),
        client.put('/registry/txn/empty').value(''),
        client.delete().key('/registry/pods/default/pod-5'),
      )
      .commit();
    expect(txn.succeeded).toBe(true);
    await client.put(Buffer.from([0x00, 0xff, 0x01, 0x00])).value(Buffer.from([0xff, 0x00, 0xfe, 0x80]));
    await client.put(Buffer.from([0x01, 0xc0])).value(Buffer.alloc(0));
    await client.put(Buffer.from('/registry/non-utf8/\xe9\xff', 'latin1')).value(Buffer.from([0xc3, 0x28, 0xa0, 0xa1]));
    await client.put('/registry/secrets/big').value(randomBytes(500 * 1024));
    await client.put('/registry/leases/chosen').value('held').lease(bigLease);
    await client.put('/registry/leases/etcd-1').value('held').lease(etcdLease);
    await client.put('/registry/leases/etcd-2').value('held').lease(etcdLease);
    await client.delete().prefix('/registry/txn/');
    await client.delete().key('/registry/configmaps/default/cm');
    await client.put('/registry/configmaps/default/cm').value('recreated');
    await client.leaseClient.leaseRevoke({ ID: etcdLease });
    await client.put('/registry/last').value('done');
    const lastRev = Number((await client.get('/registry/last').exec()).header.revision);

    await waitFor(async () => {
      await clock.advanceAsync(1000);
      return runs.every((r) => r.snapshotter.chain.prevSnapshot?.lastRevision === lastRev);
    }, 'deltas up to the last write');
    for (const r of runs) {
      r.stop.abort();
      await r.running;
    }

    // What etcd reports for the same revisions, through an independent watch.
    const expected: string[] = [];
    const watcher = await client
      .watch()
      .inRange({ start: Buffer.from([0]), end: Buffer.from([0]) })
      .startRevision(String(fullRev + 1))
      .create();
    await new Promise<void>((resolve) => {
      watcher.on('data', (res) => {
        for (const ev of res.events) {
          const kv = ev.kv as unknown as RawWatchKv;
          expected.push(etcdLine(ev.type as 'Put' | 'Delete', kv));
          if (Number(kv.mod_revision) >= lastRev) resolve();
        }
      });
    });
    await watcher.cancel();
    expect(expected.some((l) => l.endsWith(` ${bigLease}`))).toBe(true);
    expect(expected.filter((l) => l.startsWith('1 ')).length).toBeGreaterThanOrEqual(7);

    for (const r of runs) {
      const list = (await r.store.list()).filter((s) => !s.isChunk);
      const full = list.find((s) => s.kind === 'Full')!;
      const deltas = list.filter((s) => s.kind === 'Incr');
      expect(deltas.length, r.name).toBeGreaterThanOrEqual(2);
      const out = join(dir, `export-${r.name}`);
      await mkdir(out);
      const deltaPaths = [];
      for (const d of deltas) deltaPaths.push(await exportObject(r.store, d, out));
      const fullPath = await exportObject(r.store, full, out);

      const fullDump = (await go.run(['full', fullPath])).toString('utf8');
      expect(fullDump, r.name).toMatch(new RegExp(`^F ${full.snapName.replace(/\./g, '\\.')} \\d+ [0-9a-f]{64}\\n$`));

      const files = parseDeltaDump((await go.run(['delta', ...deltaPaths])).toString('utf8'));
      expect(files.map((f) => f.name)).toEqual(deltas.map((d) => d.snapName));
      let next = fullRev + 1;
      const goLines: string[] = [];
      for (const [i, f] of files.entries()) {
        const d = deltas[i]!;
        expect(f.remarshal, `${r.name} ${f.name}: Go re-encodes our JSON identically`).toBe('same');
        expect(d.startRevision, f.name).toBe(next);
        const revs = f.lines.map((l) => Number(l.split(' ')[4]));
        expect(Math.min(...revs)).toBeGreaterThanOrEqual(d.startRevision);
        expect(revs.at(-1)).toBe(d.lastRevision);
        // Our own parser is the second reader: same fields, and our time strings are Go's own formatting.
        const ours = (await readDeltaEvents(r.store, d)).map(ourLine);
        expect(f.lines, f.name).toEqual(ours);
        goLines.push(...f.lines);
        next = d.lastRevision + 1;
      }
      expect(next - 1).toBe(lastRev);
      expect(goLines.map(withoutTime), r.name).toEqual(expected);
      // The 500 KiB value crossed the 256 KiB limit: its delta ends at that revision or shortly after.
      expect(files.some((f) => f.jsonBytes > 500 * 1024)).toBe(true);
      // The chosen lease lives on: its granted TTL is in our JSON, which Go read past (remarshal above).
      expect(
        files.reduce((n, f) => n + f.leaseTtls, 0),
        r.name,
      ).toBeGreaterThanOrEqual(1);
    }
  });
});

describe('control: the same Go program accepts upstream v0.23 fixture stores', () => {
  for (const c of FIXTURE_CASES) {
    it(c, async () => {
      const v2 = join(FIXTURES, c, 'snapstore', 'v2');
      const names = (await readdir(v2)).sort();
      const incr = names.filter((n) => n.startsWith('Incr-'));
      const fulls = names.filter((n) => n.startsWith('Full-'));
      const files = parseDeltaDump((await go.run(['delta', ...incr.map((n) => join(v2, n))])).toString('utf8'));
      expect(files.map((f) => f.name)).toEqual(incr);
      for (const f of files) {
        expect(f.remarshal, f.name).toBe('same');
        expect(f.leaseTtls, f.name).toBe(0);
        expect(f.lines.length).toBe(f.events);
        const [, start, last] = f.name.split('-');
        const revs = f.lines.map((l) => Number(l.split(' ')[4]));
        expect(Math.min(...revs)).toBeGreaterThanOrEqual(Number(start));
        expect(revs.at(-1)).toBe(Number(last));
        const suffix = /(\.gz|\.zlib|\.Z)$/.exec(f.name)?.[1] ?? '';
        expect((await readOurFile(join(v2, f.name), f.name, suffix)).map(ourLine), f.name).toEqual(f.lines);
      }
      const fullOut = (await go.run(['full', ...fulls.map((n) => join(v2, n))])).toString('utf8');
      expect(fullOut.trim().split('\n')).toHaveLength(fulls.length);
    });
  }
});
