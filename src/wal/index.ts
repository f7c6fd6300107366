export { crc32c } from '../encoding/crc32c.js';
export { listWalNames, parseSnapName, parseWalName, snapName, walName } from './names.js';
export type { SnapName, WalName } from './names.js';
export { scanWal } from './reader.js';
export type { WalScanOptions, WalScanOutcome, WalScanProblem, WalVisitor } from './reader.js';
export {
  RecordType,
  decodeEntry,
  decodeHardState,
  decodeMemberMetadata,
  decodeRaftSnapshotMetadata,
  decodeRecord,
  decodeSnapEnvelope,
  decodeWalSnapshot,
} from './records.js';
export type { EntryHeader, HardState, MemberMetadata, SnapEnvelope, SnapshotRef, WalRecord } from './records.js';
export { loadNewestSnapshot, readSnapFile } from './snap.js';
export type { LoadedSnapshot, SnapLoadResult } from './snap.js';
export { readWalMetadata, selectSegments, verifyWal } from './verify.js';
export type { WalVerifyOptions, WalVerifyResult } from './verify.js';
