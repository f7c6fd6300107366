// Preloaded into the s3rver process (node --require) by s3rver.ts: gives s3rver's object writes S3's
// semantics. S3 makes an object visible only once its PUT (or CompleteMultipartUpload) has completed; a client
// that dies in the middle of the body leaves nothing. s3rver 3.7 streams the body straight into the object's
// file: the half-written object is listed while the upload runs, and stays, truncated (an empty object with the
// empty body's MD5), when the client goes away. The fault soak found that (seed 51: a sidecar SIGKILLed while
// uploading a delta left an empty `Incr-…` behind, which the next sidecar took for the chain's newest delta).
// Here the body goes to a temporary file beside the object, renamed over it only when the whole body arrived.
'use strict';
const { randomBytes } = require('node:crypto');
const { mkdir, rename, rm } = require('node:fs/promises');
const { createWriteStream } = require('node:fs');
const { dirname } = require('node:path');
const { Transform, pipeline } = require('node:stream');
const { createHash } = require('node:crypto');
const FilesystemStore = require('s3rver/lib/stores/filesystem.js');

FilesystemStore.prototype.putObject = async function putObjectAtomically(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  await mkdir(dirname(objectPath), { recursive: true });
  // Not named like an object (s3rver lists files ending in ._S3rver_object), so it is never listed.
  const partPath = `${objectPath}.part-${randomBytes(6).toString('hex')}`;
  const md5 = createHash('md5');
  let size = 0;
  try {
    if (Buffer.isBuffer(object.content)) {
      md5.update(object.content);
      size = object.content.length;
      await new Promise((resolve, reject) => createWriteStream(partPath).on('error', reject).end(object.content, resolve));
    } else {
      const count = new Transform({
        transform(chunk, _encoding, callback) {
          md5.update(chunk);
          size += chunk.length;
          callback(null, chunk);
        },
      });
      // A request body that ends early (the client went away) errors here: nothing is renamed.
      await new Promise((resolve, reject) =>
        pipeline(object.content, count, createWriteStream(partPath), (err) => (err ? reject(err) : resolve())),
      );
    }
    await rename(partPath, objectPath);
  } catch (err) {
    await rm(partPath, { force: true });
    throw err;
  }
  const digest = md5.digest('hex');
  await this.putMetadata(object.bucket, object.key, object.metadata, digest);
  return { size, md5: digest };
};
