// Preloaded into a CLI process by the module-load test (node --import): appends the URL of every module the
// process loads (ES modules, CommonJS files and node: builtins) to the file named by ETCDBRCTL_MODULE_LOG.
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
}
