/**
 * A small Dockerfile reader for the image tests: stages, instructions with their flags, COPY sources and
 * destinations, ENV pairs, exec-form arrays, and .dockerignore matching. It covers the syntax our Dockerfile
 * uses (comments, parser directives, `\` continuations, `--flag=value` options, exec and shell forms);
 * anything it does not understand is an error naming the line, not a silent skip.
 */

export interface Instruction {
  /** Upper-case keyword: FROM, RUN, COPY, ... */
  keyword: string;
  /** Text after the keyword and its flags, continuations joined with a space. */
  args: string;
  /** `--name=value` options (COPY --from, --chown, ...); `--link` alone maps to "". */
  flags: Record<string, string>;
  /** 1-based line of the keyword. */
  line: number;
}

export interface Stage {
  index: number;
  /** Image reference of FROM. */
  image: string;
  /** `AS name`, if given. */
  name: string | undefined;
  line: number;
  instructions: Instruction[];
}

export interface Dockerfile {
  /** ARGs before the first FROM. */
  globalArgs: Instruction[];
  stages: Stage[];
}

const KEYWORDS = new Set([
  'FROM', 'RUN', 'CMD', 'LABEL', 'EXPOSE', 'ENV', 'ADD', 'COPY', 'ENTRYPOINT', 'VOLUME', 'USER', 'WORKDIR',
  'ARG', 'ONBUILD', 'STOPSIGNAL', 'HEALTHCHECK', 'SHELL', 'MAINTAINER',
]);

/** Joins continuation lines and drops comments; returns [line number, logical line] pairs. */
function logicalLines(text: string): Array<[number, string]> {
  const out: Array<[number, string]> = [];
  const lines = text.split('\n');
  let current: string | undefined;
  let start = 0;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!.replace(/\r$/, '');
    const trimmed = raw.trim();
    // Comment lines (also inside a continuation) are removed before continuation handling, as BuildKit does.
    if (trimmed.startsWith('#')) continue;
    if (current === undefined) {
      if (trimmed === '') continue;
      current = '';
      start = i + 1;
    } else if (trimmed === '') {
      continue;
    }
    if (/\\\s*$/.test(raw)) {
      current += raw.replace(/\\\s*$/, '').trim() + ' ';
      continue;
    }
    current += trimmed;
    out.push([start, current.trim()]);
    current = undefined;
  }
  if (current !== undefined) throw new Error(`Dockerfile line ${start}: continuation runs past the end of the file`);
  return out;
}

function parseFlags(rest: string, line: number): { flags: Record<string, string>; args: string } {
  const flags: Record<string, string> = {};
  let args = rest;
  for (;;) {
    const m = /^--([a-z][a-z-]*)(?:=(\S*))?\s*/.exec(args);
    if (!m) break;
    if (m[1]! in flags) throw new Error(`Dockerfile line ${line}: flag --${m[1]} given twice`);
    flags[m[1]!] = m[2] ?? '';
    args = args.slice(m[0].length);
  }
  return { flags, args };
}

export function parseDockerfile(text: string): Dockerfile {
  const result: Dockerfile = { globalArgs: [], stages: [] };
  for (const [line, content] of logicalLines(text)) {
    const m = /^(\S+)\s*(.*)$/.exec(content)!;
    const keyword = m[1]!.toUpperCase();
    if (!KEYWORDS.has(keyword)) throw new Error(`Dockerfile line ${line}: unknown instruction ${m[1]}`);
    const hasFlags = keyword === 'COPY' || keyword === 'ADD' || keyword === 'RUN' || keyword === 'FROM';
    const { flags, args } = hasFlags ? parseFlags(m[2]!, line) : { flags: {}, args: m[2]! };
    const instruction: Instruction = { keyword, args, flags, line };
    if (keyword === 'FROM') {
      const from = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args);
      if (!from) throw new Error(`Dockerfile line ${line}: cannot read FROM ${args}`);
      result.stages.push({ index: result.stages.length, image: from[1]!, name: from[2], line, instructions: [] });
      continue;
    }
    const stage = result.stages.at(-1);
    if (stage === undefined) {
      if (keyword !== 'ARG') throw new Error(`Dockerfile line ${line}: ${keyword} before the first FROM`);
      result.globalArgs.push(instruction);
      continue;
    }
    stage.instructions.push(instruction);
  }
  return result;
}

/** The JSON array of an exec-form instruction (ENTRYPOINT, CMD), or undefined for the shell form. */
export function execForm(args: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined;
  const parsed: unknown = JSON.parse(args);
  if (!Array.isArray(parsed) || !parsed.every((s) => typeof s === 'string')) throw new Error(`not an exec-form array: ${args}`);
  return parsed as string[];
}

/** Sources and destination of COPY/ADD (shell form `a b dest` or JSON form). */
export function copyPaths(instruction: Instruction): { sources: string[]; dest: string } {
  const parts = execForm(instruction.args) ?? instruction.args.split(/\s+/).filter(Boolean);
  if (parts.length < 2) throw new Error(`Dockerfile line ${instruction.line}: COPY needs a source and a destination`);
  return { sources: parts.slice(0, -1), dest: parts.at(-1)! };
}

/** ENV pairs, `ENV a=1 b="x y"` or the legacy `ENV a value`. Values keep `${VAR}` references as written. */
export function envPairs(instruction: Instruction): Array<[string, string]> {
  const args = instruction.args;
  if (!/^[A-Za-z_][A-Za-z0-9_]*=/.test(args)) {
    const m = /^(\S+)\s+(.*)$/.exec(args);
    if (!m) throw new Error(`Dockerfile line ${instruction.line}: cannot read ENV ${args}`);
    return [[m[1]!, m[2]!]];
  }
  const out: Array<[string, string]> = [];
  const re = /([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|\S*)\s*/y;
  let pos = 0;
  while (pos < args.length) {
    re.lastIndex = pos;
    const m = re.exec(args);
    if (!m) throw new Error(`Dockerfile line ${instruction.line}: cannot read ENV at ${JSON.stringify(args.slice(pos))}`);
    let value = m[2]!;
    if (value.startsWith('"')) value = value.slice(1, -1).replace(/\\(.)/g, '$1');
    else if (value.startsWith("'")) value = value.slice(1, -1);
    out.push([m[1]!, value]);
    pos = re.lastIndex;
  }
  return out;
}

/** Resolves a COPY/WORKDIR path against the current working directory of the stage. */
export function resolveInStage(cwd: string, p: string): string {
  const joined = p.startsWith('/') ? p : `${cwd.replace(/\/$/, '')}/${p}`;
  const parts: string[] = [];
  for (const seg of joined.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') parts.pop();
    else parts.push(seg);
  }
  return '/' + parts.join('/');
}

function globToRegExp(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') {
      if (pattern[i + 1] === '*') {
        // `**/` matches zero or more directories; a trailing `**` anything.
        re += pattern[i + 2] === '/' ? '(?:.*/)?' : '.*';
        i += pattern[i + 2] === '/' ? 2 : 1;
      } else {
        re += '[^/]*';
      }
    } else if (c === '?') {
      re += '[^/]';
    } else {
      re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
  }
  return new RegExp(`^${re}$`);
}

/**
 * Whether .dockerignore keeps `file` (a context-relative path) in the build context: the last pattern that
 * matches the path or one of its parent directories decides, `!` patterns re-include (Docker's rules).
 */
export function inBuildContext(dockerignore: string, file: string): boolean {
  const patterns = dockerignore
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const negate = l.startsWith('!');
      const body = (negate ? l.slice(1) : l).trim().replace(/^\/+/, '').replace(/\/+$/, '');
      return { negate, re: globToRegExp(body) };
    });
  const segments = file.split('/');
  const candidates = segments.map((_, i) => segments.slice(0, i + 1).join('/'));
  let included = true;
  for (const p of patterns) {
    if (candidates.some((c) => p.re.test(c))) included = p.negate;
  }
  return included;
}
