/**
 * The HTTP status of a failed request, from the code of the error that failed it (src/errors.ts): the
 * caller's mistake (4xx) apart from ours or a dependency's (5xx). Routes whose statuses upstream fixes keep
 * upstream's (e.g. 500 for a failed out-of-schedule snapshot); this decides the rest.
 */
import { errorCode } from '../errors.js';

const STATUS_BY_CODE: Readonly<Record<string, number>> = {
  // The request or the configuration it names is wrong.
  E_INVALID_INPUT: 400,
  E_INVALID_VALUE: 400,
  E_INVALID_FLAG: 400,
  E_INVALID_CONFIG: 400,
  E_INVALID_SCHEDULE: 400,
  E_MAINTENANCE_REQUEST: 400,
  E_API_AUTH: 401,
  // The state forbids it now; the same request may succeed later.
  E_CONFLICT: 409,
  E_MAINTENANCE_BUSY: 409,
  // A system this sidecar depends on did not answer, or this sidecar is stopping.
  E_UNAVAILABLE: 503,
  E_STOPPED: 503,
  E_SNAPSHOTTER_STOPPED: 503,
  E_ETCD_UNAVAILABLE: 503,
  E_ETCD_TIMEOUT: 503,
  E_ETCD_CLOSED: 503,
  E_UNREACHABLE: 503,
  E_KUBE_UNREACHABLE: 503,
};

/** The status for `err`; `fallback` (500 unless given) for codes without one, a bug, or an uncoded error. */
export function httpStatusOf(err: unknown, fallback = 500): number {
  const code = errorCode(err);
  return (code !== undefined ? STATUS_BY_CODE[code] : undefined) ?? fallback;
}
