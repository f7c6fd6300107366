/**
 * The fixed bytes of one delta element as Go's encoding/json writes a `{etcdEvent, time}` (upstream's
 * `clientv3.Event` with omitempty, then the receive time), plus our `leaseTTL`: declared once for the writer
 * (delta-write.ts) and the parser's fast path (delta-element.ts), which must agree on them byte for byte.
 *
 *   {"etcdEvent":{["type":1,]"kv":{["key":"b64"][,"create_revision":N][,"mod_revision":N][,"version":N]
 *     [,"value":"b64"][,"lease":N]}},"time":"RFC 3339"[,"leaseTTL":N]}
 */

function ascii(text: string): Buffer {
  return Buffer.from(text, 'latin1');
}

export const ELEMENT_OPEN = ascii('{"etcdEvent":{');
/** Only a DELETE has a type: PUT is 0, which omitempty leaves out. */
export const TYPE_DELETE = ascii('"type":1,');
export const KV_OPEN = ascii('"kv":{');
export const KEY = ascii('"key":"');
export const CREATE_REVISION = ascii('"create_revision":');
export const MOD_REVISION = ascii('"mod_revision":');
export const VERSION = ascii('"version":');
export const VALUE = ascii('"value":"');
export const LEASE = ascii('"lease":');
/** The kv fields in the order Go writes them (mvccpb.KeyValue's field order). */
export const KV_FIELDS: readonly Buffer[] = [KEY, CREATE_REVISION, MOD_REVISION, VERSION, VALUE, LEASE];
/** The end of the kv and of etcdEvent, and the start of the time string. */
export const TIME = ascii('}},"time":"');
/** Ours, after the time (DeltaEvent.leaseTTL). */
export const LEASE_TTL = ascii(',"leaseTTL":');
/** The end of the time string and of the element. */
export const ELEMENT_CLOSE = ascii('"}');
