/**
 * Fills an etcd with about `mb` MiB of kube-like values, for the full-snapshot bench.
 *
 *   node --import tsx e2e/bench/support/fill-etcd.ts --endpoint=http://127.0.0.1:2379 --mb=1024
 *
 * Runs as its own process so the bench that measures RSS never held the client, the generated values
 * or the garbage they leave. Values are 1-100 KiB (log-uniform, so most are small and there are many
 * keys, ~50,000 per GiB), generated one by one from a seeded PRNG as JSON objects with random ids, so
 * they compress about as well as real Kubernetes objects and no two are alike. Puts go `concurrency`
 * at a time. Prints one JSON line: keys, bytes, seconds, revision.
 */
import { Etcd3 } from 'etcd3';

const KiB = 1024;

function flag(name: string): string | undefined {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  return hit?.slice(name.length + 3);
}

/** mulberry32: small, fast and deterministic. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

const NAMESPACES = ['default', 'kube-system', 'team-a', 'team-b', 'monitoring', 'staging', 'garden', 'shoot--core'];
const APPS = ['web', 'api', 'worker', 'cache', 'ingress', 'scheduler', 'metrics', 'etcd', 'vpn', 'dns'];

/**
 * Object templates: '#' becomes a random hex digit, '@' a random base64 character (secret data, which
 * compresses least). Filling placeholders into copied bytes is ~10x faster than building strings, so
 * the filler keeps up with etcd instead of competing with it for the CPU.
 */
interface Template {
  bytes: Buffer;
  hex: number[];
  b64: number[];
}

function templates(rnd: () => number): Template[] {
  const out: Template[] = [];
  const uid = '########-####-####-####-############';
  for (const ns of NAMESPACES) {
    for (const app of APPS) {
      const image = `registry.example.com/${app}:1.${rnd() % 30}.${rnd() % 10}`;
      const texts = [
        `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"${app}-#########-#####","namespace":"${ns}","uid":"${uid}",` +
          `"resourceVersion":"########","labels":{"app":"${app}","pod-template-hash":"##########"}},"spec":{"nodeName":` +
          `"node-##","containers":[{"name":"${app}","image":"${image}","resources":{"requests":{"cpu":"${(1 + (rnd() % 8)) * 100}m",` +
          `"memory":"${64 << (rnd() % 4)}Mi"}},"ports":[{"containerPort":${8000 + (rnd() % 100)},"protocol":"TCP"}]}]},` +
          `"status":{"phase":"Running","podIP":"10.##.##.##","qosClass":"Burstable","startTime":"2026-11-##T##:##:##Z"}}`,
        `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"${app}-#####","namespace":"${ns}","uid":"${uid}"},` +
          `"type":"Opaque","data":{"tls.crt":"${'@'.repeat(64 + (rnd() % 400))}"}}`,
        `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"${app}-##","namespace":"${ns}","uid":"${uid}"},` +
          `"spec":{"holderIdentity":"${app}-##-#####","leaseDurationSeconds":40,"renewTime":"2026-11-21T00:##:##.######Z"}}`,
      ];
      for (const text of texts) {
        const bytes = Buffer.from(text);
        const hex: number[] = [];
        const b64: number[] = [];
        for (let i = 0; i < bytes.length; i++) {
          if (bytes[i] === 0x23) hex.push(i);
          else if (bytes[i] === 0x40) b64.push(i);
        }
        out.push({ bytes, hex, b64 });
      }
    }
  }
  return out;
}

const HEX = Buffer.from('0123456789abcdef');
const B64 = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/');

/** One value of exactly `size` bytes: template objects with fresh random fields, the last one cut off. */
function kubeValue(rnd: () => number, pool: readonly Template[], size: number): Buffer {
  const value = Buffer.allocUnsafe(size);
  let pos = 0;
  while (pos < size) {
    const t = pool[rnd() % pool.length] as Template;
    const n = t.bytes.copy(value, pos);
    let r = 0;
    for (let i = 0; i < t.hex.length; i++) {
      if ((i & 7) === 0) r = rnd();
      const at = pos + (t.hex[i] as number);
      if (at < size) value[at] = HEX[(r >>> ((i & 7) * 4)) & 15] as number;
    }
    for (let i = 0; i < t.b64.length; i++) {
      if (i % 5 === 0) r = rnd();
      const at = pos + (t.b64[i] as number);
      if (at < size) value[at] = B64[(r >>> ((i % 5) * 6)) & 63] as number;
    }
    pos += n;
  }
  return value;
}

async function main(): Promise<void> {
  const endpoint = flag('endpoint');
  if (!endpoint) throw new Error('--endpoint is required');
  const target = Number(flag('mb') ?? 1024) * 1024 * KiB;
  const concurrency = Number(flag('concurrency') ?? 32);
  const client = new Etcd3({ hosts: endpoint });
  const rnd = prng(0x5eed);
  const pool = templates(rnd);
  const started = Date.now();
  let bytes = 0;
  let keys = 0;
  let revision = '0';
  let lastReport = started;

  const worker = async (): Promise<void> => {
    while (bytes < target) {
      // log-uniform 1..100 KiB
      const size = Math.round(KiB * 100 ** (rnd() / 0x1_0000_0000));
      const value = kubeValue(rnd, pool, size);
      bytes += size;
      const n = keys++;
      const key = `/registry/bench/${NAMESPACES[n % NAMESPACES.length]}/obj-${String(n).padStart(8, '0')}`;
      const res = await client.put(key).value(value).exec();
      if (BigInt(res.header.revision) > BigInt(revision)) revision = res.header.revision;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        process.stderr.write(`  filled ${(bytes / 1024 / KiB).toFixed(0)} MiB, ${keys} keys\n`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    client.close();
  }
  console.log(JSON.stringify({ keys, bytes, seconds: (Date.now() - started) / 1000, revision }));
}

await main();
