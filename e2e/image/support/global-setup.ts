import { ensureBaseImages } from './base-images.js';
import { preparePodman } from './podman.js';

/**
 * Before any image test: podman's configuration, and stand-ins for the Dockerfile's base images (made once,
 * minutes; kept in .local/image-test). Anything missing fails the run here, naming it.
 */
export default async function setup(): Promise<void> {
  preparePodman();
  await ensureBaseImages((line) => process.stdout.write(line));
}
