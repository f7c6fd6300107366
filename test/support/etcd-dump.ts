import { Etcd3 } from 'etcd3';

export interface DumpedKv {
  key: string; // base64
  value: string; // base64
  create_revision: number;
  mod_revision: number;
  version: number;
  lease: string;
}

export interface EtcdDump {
  revision: number;
  kvs: DumpedKv[];
}

/** Every key of an etcd with its revisions, sorted by raw key bytes (as expected.json is). */
export async function dumpEtcd(clientUrl: string): Promise<EtcdDump> {
  const client = new Etcd3({ hosts: clientUrl, grpcOptions: { 'grpc.max_receive_message_length': -1 } });
  try {
    const res = await client.getAll().exec();
    const kvs = res.kvs.map((kv) => ({
      key: kv.key.toString('base64'),
      value: kv.value.toString('base64'),
      create_revision: Number(kv.create_revision),
      mod_revision: Number(kv.mod_revision),
      version: Number(kv.version),
      lease: String(kv.lease),
    }));
    kvs.sort((a, b) => Buffer.compare(Buffer.from(a.key, 'base64'), Buffer.from(b.key, 'base64')));
    return { revision: Number(res.header.revision), kvs };
  } finally {
    client.close();
  }
}
