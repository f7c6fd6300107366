// Preloaded into a CLI process by the module-load test (node --import): appends the URL of every module the
// process loads (ES modules, CommonJS files and node: builtins) to the file named by ETCDBRCTL_MODULE_LOG, and
// at exit every module of Node's own it loaded, internal ones included, as `builtin:<id>` (e.g.
// `builtin:internal/deps/undici/undici`, which no hook sees load).
import { appendFileSync } from 'node:fs';
import { registerHooks } from 'node:module';

const log = process.env.ETCDBRCTL_MODULE_LOG;
if (log) {
  registerHooks({
    load(url, context, nextLoad) {
      appendFileSync(log, `${url}\n`);
      return nextLoad(url, context);
    },
  });
  process.once('exit', () => {
    const builtins = process.moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => `builtin:${m.slice(13)}`);
    appendFileSync(log, `${builtins.join('\n')}\n`);
  });
}
