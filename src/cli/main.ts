/**
 * The CLI entry: parses the subcommand and its flags, builds and validates its config, resolves its
 * stores, and hands over to `commands/<name>.ts`. `main` is in-process and returns the exit code;
 * `runFromProcess` wires it to the real process (argv, env, signals, umask).
 *
 * Exit codes: 0 success or help; 1 bad usage, invalid configuration or a failed command (as cobra and
 * upstream's Fatalf). A failure is one line on stderr (see failure.ts); its stack only at debug level.
 */
import { systemClock } from '../clock.js';
import { EtcdbrError } from '../errors.js';
import type { StoreConfig } from '@etcdbrctl/snapstore';
import { buildCommandConfig } from '../config/build.js';
import { COMMAND_SPECS, isCommandName } from '../config/commands.js';
import { readConfigFile } from '../config/file.js';
import { ConfigError } from '../config/schema.js';
import { buildStoreConfig, userHomeDir } from '../config/store.js';
import type { StoreRole } from '../config/store.js';
import type { CommandConfigs, CommandName, EncryptionConfig, SnapstoreConfig } from '../config/types.js';
import { parseGoBool } from '../config/values.js';
import { createLogger } from '../log.js';
import { textLogDestination } from '../log-text.js';
import { formatVersionInfo, versionInfo } from '../version.js';
import type { CliIO, CommandContext, Env } from '../config/context.js';
import { podEnvironment } from '../config/pod-environment.js';
import { FlagError, helpWidth } from './flags.js';
import { FLAG_USE, ignoredFlagsMessage, refusedFlagMessage } from './flag-use.js';
import { reportFailure } from './failure.js';
import { storeStallTimeout } from './deadlines.js';
import { signalLogLine, StopSignals, stopSignalWindow } from './signals.js';
import { commandFlagSet, commandHelp, rootFlagSet, rootHelp } from './help.js';

export type CommandRunner<N extends CommandName> = (config: CommandConfigs[N], ctx: CommandContext) => Promise<number>;

/** Loaded on demand so that, say, `ls` never loads the server's dependencies. */
const RUNNERS: { [N in CommandName]: () => Promise<CommandRunner<N>> } = {
  server: async () => (await import('./commands/server.js')).run,
  snapshot: async () => (await import('./commands/snapshot.js')).run,
  restore: async () => (await import('./commands/restore.js')).run,
  initialize: async () => (await import('./commands/initialize.js')).run,
  compact: async () => (await import('./commands/compact.js')).run,
  copy: async () => (await import('./commands/copy.js')).run,
  ls: async () => (await import('./commands/ls.js')).run,
  verify: async () => (await import('./commands/verify.js')).run,
};

export interface MainOptions {
  /** Aborts long-running commands (SIGINT/SIGTERM in the real process). */
  signal?: AbortSignal;
  /** Base of relative Local containers; default `$HOME` of `env` as the Go tool reads it (`userHomeDir`). */
  homeDir?: string;
  /** Replaces command implementations (tests). */
  runners?: { [N in CommandName]?: CommandRunner<N> };
  /** Hand freed native memory back to the OS while a long-lived command runs (native-heap.ts); default on. */
  trimNativeHeap?: boolean;
}

/** The commands that stay up for the pod's lifetime (bin/etcdbrctl gives them the memory-first V8 flags too). */
const LONG_LIVED: ReadonlySet<CommandName> = new Set(['server', 'snapshot']);

/** The stores a command uses, by role, and the flags each is built from. */
export function storesOf<N extends CommandName>(name: N, config: CommandConfigs[N]): Array<[StoreRole, SnapstoreConfig]> {
  switch (name) {
    case 'server': {
      const c = config as CommandConfigs['server'];
      const out: Array<[StoreRole, SnapstoreConfig]> = [['primary', c.snapstoreConfig]];
      // Upstream looks at the secondary store only when sync is enabled.
      if (c.secondarySnapstoreConfig.backupSyncEnabled) out.push(['secondary', c.secondarySnapstoreConfig.storeConfig]);
      return out;
    }
    case 'copy': {
      const c = config as CommandConfigs['copy'];
      return [
        ['source', c.sourceSnapstoreConfig],
        ['primary', c.snapstoreConfig],
      ];
    }
    default:
      return [['primary', (config as { snapstoreConfig: SnapstoreConfig }).snapstoreConfig]];
  }
}

/** The stores a command never writes to: opened read-only, so a mistyped path is an error, not a new store. */
export function readsOnly(name: CommandName, role: StoreRole): boolean {
  return name === 'ls' || name === 'verify' || name === 'restore' || (name === 'copy' && role === 'source');
}

function usageError(io: CliIO, message: string, helpCommand: string): number {
  io.stderr.write(`Error: ${message}\nRun '${helpCommand} --help' for usage.\n`);
  return 1;
}

export async function main(argv: readonly string[], env: Env, io: CliIO, options: MainOptions = {}): Promise<number> {
  const first = argv[0];
  if (first === undefined) {
    io.stdout.write(rootHelp(helpWidth(io.stdout, env)));
    return 0;
  }
  if (first === 'help') return help(argv.slice(1), io, env);
  if (isCommandName(first)) return runCommand(first, argv.slice(1), env, io, options);

  let parsed;
  try {
    parsed = rootFlagSet().parse(argv);
  } catch (err) {
    if (err instanceof FlagError) return usageError(io, err.message, 'etcdbrctl');
    throw err;
  }
  const name = parsed.args[0];
  if (name !== undefined) {
    // As cobra: the first non-flag argument names the command; its own flags then parse the rest.
    if (isCommandName(name)) {
      const i = argv.indexOf(name);
      return runCommand(name, [...argv.slice(0, i), ...argv.slice(i + 1)], env, io, options);
    }
    return usageError(io, `unknown command ${JSON.stringify(name)} for "etcdbrctl"`, 'etcdbrctl');
  }
  if (parsed.help) {
    io.stdout.write(rootHelp(helpWidth(io.stdout, env)));
    return 0;
  }
  if (parsed.changed.get('version') === true) {
    io.stdout.write(formatVersionInfo(versionInfo(env)).join('\n') + '\n');
    return 0;
  }
  io.stdout.write(rootHelp(helpWidth(io.stdout, env)));
  return 0;
}

function help(args: readonly string[], io: CliIO, env: Env): number {
  const topic = args[0];
  if (topic === undefined) {
    io.stdout.write(rootHelp(helpWidth(io.stdout, env)));
    return 0;
  }
  if (isCommandName(topic)) {
    io.stdout.write(commandHelp(COMMAND_SPECS[topic], helpWidth(io.stdout, env)));
    return 0;
  }
  io.stderr.write(`Unknown help topic ${JSON.stringify(topic)}\n`);
  io.stdout.write(rootHelp(helpWidth(io.stdout, env)));
  return 1;
}

async function runCommand<N extends CommandName>(
  name: N,
  args: readonly string[],
  env: Env,
  io: CliIO,
  options: MainOptions,
): Promise<number> {
  const spec = COMMAND_SPECS[name];
  const helpCommand = `etcdbrctl ${name}`;
  let parsed;
  try {
    parsed = commandFlagSet(spec).parse(args);
  } catch (err) {
    if (err instanceof FlagError) {
      const refused = err.unknownFlag !== undefined && FLAG_USE[name].refused.includes(err.unknownFlag);
      return usageError(io, refused ? refusedFlagMessage(name, err.unknownFlag as string) : err.message, helpCommand);
    }
    throw err;
  }
  if (parsed.help) {
    io.stdout.write(commandHelp(spec, helpWidth(io.stdout, env)));
    return 0;
  }
  const stray = parsed.args[0];
  if (stray !== undefined) {
    // pflag leaves `false` in `--flag false` as an argument and cobra ignores it, silently keeping the
    // flag true; refusing it is safer.
    let isBool = true;
    try {
      parseGoBool(stray);
    } catch {
      isBool = false;
    }
    const hint = isBool ? ` (a bool flag takes its value with '=', e.g. --compress-snapshots=${stray})` : '';
    return usageError(io, `unexpected argument ${JSON.stringify(stray)} for "${helpCommand}"${hint}`, helpCommand);
  }

  let built;
  try {
    const configFile = parsed.changed.get('config-file');
    const input: Parameters<typeof buildCommandConfig>[1] = { flags: parsed.changed };
    if (spec.configFile && typeof configFile === 'string' && configFile !== '') {
      input.configDocument = (await readConfigFile(configFile)) ?? null;
      input.configFilePath = configFile;
    }
    built = buildCommandConfig(name, input);
  } catch (err) {
    if (err instanceof ConfigError) {
      io.stderr.write(`Error: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
  const config = built.config;
  const logger = createLogger({
    logLevel: config.logLevel,
    destination: config.logFormat === 'text' ? textLogDestination(io.stderr) : io.stderr,
  });
  for (const w of built.warnings) logger.warn(w);
  for (const n of built.notes) logger.info(n);
  // Their values were still checked above, as the Go tool checks them.
  const ignored = [...parsed.changed.keys()].filter((f) => FLAG_USE[name].ignored.includes(f));
  if (ignored.length > 0) {
    // etcd-druid passes the auto-compaction flags to every sidecar: a warning on each start would be noise.
    logger[name === 'server' ? 'info' : 'warn'](ignoredFlagsMessage(name, ignored));
  }

  // Not os.homedir(): it falls back to the password database when HOME is unset, where Go fails; and the
  // environment passed in is the one that counts, not this process's.
  const homeDir = options.homeDir ?? userHomeDir(env);
  const roles = new Map(storesOf(name, config));
  const stall = storeStallTimeout(env);
  if (stall.problem !== undefined && roles.size > 0) logger.warn(stall.problem);
  const resolveStore = async (role: StoreRole): Promise<StoreConfig | undefined> => {
    const flags = roles.get(role);
    // A store the command only reads gets no scratch directory either: reading creates nothing.
    const createTempDir = !readsOnly(name, role);
    if (flags === undefined) return undefined;
    const encryption = (config as { encryptionConfig?: EncryptionConfig }).encryptionConfig;
    const built = await buildStoreConfig(flags, { role, env, homeDir, logger, createTempDir, ...(encryption ? { encryption } : {}) });
    return built === undefined ? undefined : { ...built, fetchStallTimeoutMs: stall.ms };
  };
  const stores: CommandContext['stores'] = {};
  try {
    for (const role of roles.keys()) {
      const s = await resolveStore(role);
      if (s !== undefined) stores[role] = s;
    }
  } catch (err) {
    // Credential files, container paths: one line like every other failure.
    return reportFailure(io, logger, `etcdbrctl ${name}`, err);
  }

  const ctx: CommandContext = {
    env,
    pod: podEnvironment(env),
    io,
    logger,
    signal: options.signal ?? new AbortController().signal,
    homeDir,
    version: versionInfo(env),
    stores,
    resolveStore,
  };
  const trimmer =
    LONG_LIVED.has(name) && options.trimNativeHeap !== false
      ? await (await import('../native-heap.js')).startNativeHeapTrimmer({ clock: systemClock, logger })
      : undefined;
  try {
    const run = options.runners?.[name] ?? (await RUNNERS[name]());
    return await run(config, ctx);
  } catch (err) {
    return reportFailure(io, logger, `etcdbrctl ${name}`, err, { signal: ctx.signal });
  } finally {
    trimmer?.stop();
  }
}

/**
 * The real process: argv, env, stdio, SIGINT/SIGTERM, umask 0077. The first signal starts an orderly
 * shutdown; a repeat within a short window (Ctrl-C under npm delivers two) is the same request; a signal
 * after that forces an exit at once. Each is logged, so an operator sees what their Ctrl-C did.
 */
/** `--log-format` as given on the command line (the last one wins, as for any flag), before flags are parsed. */
export function requestedLogFormat(argv: readonly string[]): string | undefined {
  let format: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--') break;
    if (a.startsWith('--log-format=')) format = a.slice('--log-format='.length);
    else if (a === '--log-format' && i + 1 < argv.length) format = argv[++i];
  }
  return format;
}

export async function runFromProcess(): Promise<void> {
  // As upstream: files and directories the process creates are private to its user.
  process.umask(0o077);
  const ac = new AbortController();
  // The command's own logger does not exist yet (it needs the parsed flags); signals log at the default
  // level, in the format the command line asks for, so a text log does not get JSON lines in between.
  const format = requestedLogFormat(process.argv.slice(2));
  const signalLogger = createLogger({ destination: format === 'text' ? textLogDestination(process.stderr) : process.stderr });
  const window = stopSignalWindow(process.env);
  if (window.problem !== undefined) signalLogger.warn(window.problem);
  const stops = new StopSignals(window.ms);
  const onSignal = (sig: NodeJS.Signals): void => {
    const action = stops.receive(Date.now());
    const line = signalLogLine(action, sig, stops.windowMs);
    signalLogger[line.level](line.msg);
    if (action === 'shutdown') ac.abort(new EtcdbrError('E_STOPPED', `received ${sig}`));
    // stderr is synchronous for files and pipes on Linux: the line above is out before the exit.
    else if (action === 'force') process.exit(1);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    process.exitCode = await main(
      process.argv.slice(2),
      process.env,
      { stdout: process.stdout, stderr: process.stderr },
      {
        signal: ac.signal,
      },
    );
  } catch (err) {
    process.stderr.write(`Error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  // The command has finished all its work, but libraries may keep timers alive: the etcd client retries a
  // lost etcd's watch for up to 30 s, which would outlast Kubernetes' default 30 s grace period on pod
  // deletion. Exit as soon as what was written to stdout and stderr is out.
  const code = Number(process.exitCode ?? 0);
  await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  process.exit(code);
}

function flushed(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed || !stream.writable) resolve();
    else stream.write('', () => resolve());
  });
}
