export * from './errors.js';
export * from './logger.js';
export * from './store.js';
export * from './config.js';
export * from './snapshot.js';
export * from './factory.js';
export * from './retention.js';
export * from './gc.js';
