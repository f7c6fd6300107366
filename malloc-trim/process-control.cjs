'use strict';
// The compiled process-control addon (src/process_control.c; node-gyp rebuild, run by `npm ci` as this
// package's install script). bin/etcdbrctl loads it only on a Node too old to run the project, to replace
// itself with the project's Node; scripts/run-local.mjs (`npm start`) to end when npm does.
const addon = require('./build/Release/process_control.node');
exports.execve = addon.execve;
exports.setParentDeathSignal = addon.setParentDeathSignal;
