'use strict';
// The compiled addon (node-gyp rebuild, run by `npm ci` as this package's install script). Assigned by name
// so that an ES module can import { trim } (Node finds CommonJS named exports by reading this file).
const addon = require('./build/Release/malloc_trim.node');
exports.trim = addon.trim;
