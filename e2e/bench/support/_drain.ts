import { spawnSync } from 'node:child_process';
import http2 from 'node:http2';
import { Etcd3 } from 'etcd3';
import { startLocalEtcd } from '../../../src/etcd/local-etcd.js';
import { etcdBinaries } from '../../../test/support/etcd.js';
const etcd = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir: '/tmp/mywork/etcd-data' });
async function t(name: string, f: () => Promise<number>) {
  const c0 = process.cpuUsage(); const t0 = performance.now(); const n = await f(); const c = process.cpuUsage(c0);
  const s = (performance.now() - t0) / 1000;
  console.log(name.padEnd(22), s.toFixed(2), 's wall', ((c.user + c.system) / 1e6).toFixed(2), 's cpu', (n / 1048576 / s).toFixed(0), 'MiB/s', 'rss', Math.round(process.memoryUsage.rss() / 1048576));
}
async function viaEtcd3(opts: Record<string, number>) {
  const client = new Etcd3({ hosts: etcd.clientUrl, grpcOptions: { 'grpc.max_receive_message_length': -1, ...opts } });
  await client.get('x');
  let n = 0;
  try { for await (const m of (await client.maintenance.snapshot()) as unknown as AsyncIterable<{ blob: Buffer }>) n += m.blob.length; }
  finally { client.close(); }
  return n;
}
async function raw(win: number) {
  const session = http2.connect(etcd.clientUrl, { settings: { initialWindowSize: win } });
  if (win > 65535) session.setLocalWindowSize(win);
  try {
    const req = session.request({ ':method': 'POST', ':path': '/etcdserverpb.Maintenance/Snapshot', 'content-type': 'application/grpc', te: 'trailers' });
    req.end(Buffer.from([0, 0, 0, 0, 0]));
    let n = 0; let pending: Buffer = Buffer.alloc(0);
    for await (const chunk of req as AsyncIterable<Buffer>) {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= 5) {
        const len = pending.readUInt32BE(1);
        if (pending.length < 5 + len) break;
        const msg = pending.subarray(5, 5 + len);
        // field 3 (blob): tag 0x1a, varint length
        let i = 0;
        while (i < msg.length) {
          const tag = msg[i++]!; const wt = tag & 7;
          let v = 0, shift = 0, b: number; do { b = msg[i++]!; v += (b & 0x7f) * 2 ** shift; shift += 7; } while (b & 0x80);
          if (wt === 2) { if (tag >> 3 === 3) n += v; i += v; }
        }
        pending = pending.subarray(5 + len);
      }
    }
    return n;
  } finally { session.close(); }
}
try {
  for (let rep = 0; rep < 2; rep++) {
    await t('etcdctl', async () => { spawnSync('etcdctl', [`--endpoints=${etcd.clientUrl}`, 'snapshot', 'save', '/tmp/mywork/x.db'], { env: { ...process.env, ETCDCTL_API: '3' } }); return 282034208; });
    await t('etcd3 default', () => viaEtcd3({}));
    await t('etcd3 window 4MiB', () => viaEtcd3({ 'grpc-node.flow_control_window': 4 << 20 }));
    await t('raw http2 64KiB', () => raw(65535));
    await t('raw http2 4MiB', () => raw(4 << 20));
  }
} catch (e) { console.log(String(e), etcd.logTail().slice(-1500)); } finally { await etcd.stop(); }
