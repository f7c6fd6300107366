/** The one JSON line put-load.ts prints when it ends: what the bench and the generator's test read. */
export interface PutLoadResult {
  puts: number;
  seconds: number;
  putsPerSecond: number;
  lastRevision: number;
  errors: number;
}
