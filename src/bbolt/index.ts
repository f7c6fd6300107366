export { checkConsistency, checkDB } from './check.js';
export type { CheckOptions, CheckProblem, CheckResult } from './check.js';
export { Cursor } from './cursor.js';
export type { CursorEntry } from './cursor.js';
export { BoltDB, BoltError, bucketFromValue, element, isBranch, isLeaf } from './db.js';
export type { BoltErrorCode, Bucket, Element, Page } from './db.js';
export type { Meta, PageHeader } from './format.js';
export { findFlockHolder, waitForFlockRelease } from './lock.js';
export type { LockHolder } from './lock.js';
