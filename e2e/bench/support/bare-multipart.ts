/**
 * The reference an S3 full snapshot is measured against: the same bytes, already in a local file, uploaded by a
 * plain AWS SDK multipart upload (CreateMultipartUpload, UploadPart × n with `parallel` parts in flight,
 * CompleteMultipartUpload) with the same part size our uploader uses, and nothing of ours in the way (no
 * etcd, hash, codec, buffer pool or retry logic). What the emulator needs to accept the bytes, in the same run.
 */
import { createReadStream } from 'node:fs';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';

export interface BareTarget {
  endpoint: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
}

/** Cuts a file into `partSize` buffers, read ahead no further than the caller consumes. */
async function* parts(file: string, partSize: number): AsyncGenerator<Buffer> {
  let part = Buffer.allocUnsafe(partSize);
  let used = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) {
    let off = 0;
    while (off < chunk.length) {
      const n = Math.min(partSize - used, chunk.length - off);
      chunk.copy(part, used, off, off + n);
      used += n;
      off += n;
      if (used === partSize) {
        yield part;
        part = Buffer.allocUnsafe(partSize);
        used = 0;
      }
    }
  }
  if (used > 0) yield part.subarray(0, used);
}

/** Uploads `file` as `key` and deletes it again; returns the bytes uploaded. */
export async function bareMultipartUpload(
  target: BareTarget,
  file: string,
  key: string,
  partSize: number,
  parallel: number,
): Promise<number> {
  const s3 = new S3Client({
    endpoint: target.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: target.accessKeyId, secretAccessKey: target.secretAccessKey },
  });
  try {
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: target.bucket, Key: key }));
    try {
      const done: { PartNumber: number; ETag: string }[] = [];
      const inFlight = new Set<Promise<void>>();
      let bytes = 0;
      let n = 0;
      for await (const body of parts(file, partSize)) {
        const PartNumber = ++n;
        bytes += body.length;
        const p: Promise<void> = s3
          .send(new UploadPartCommand({ Bucket: target.bucket, Key: key, UploadId, PartNumber, Body: body, ContentLength: body.length }))
          .then((r) => {
            done.push({ PartNumber, ETag: r.ETag ?? '' });
          })
          .finally(() => inFlight.delete(p));
        inFlight.add(p);
        if (inFlight.size >= parallel) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      done.sort((a, b) => a.PartNumber - b.PartNumber);
      await s3.send(new CompleteMultipartUploadCommand({ Bucket: target.bucket, Key: key, UploadId, MultipartUpload: { Parts: done } }));
      return bytes;
    } catch (err) {
      await s3.send(new AbortMultipartUploadCommand({ Bucket: target.bucket, Key: key, UploadId })).catch(() => undefined);
      throw err;
    }
  } finally {
    await s3.send(new DeleteObjectCommand({ Bucket: target.bucket, Key: key })).catch(() => undefined);
    s3.destroy();
  }
}
