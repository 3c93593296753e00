/**
 * How the Redis store's scripts get their arguments: each argument either
 * as ioredis takes it (an array) or already in RESP, the Redis protocol, as
 * ioredis would write it (the one-node fast path, RedisScripts.runRaw). One
 * builder per script writes its arguments into an ArgWriter, so both forms
 * come from the same code and cannot drift (test/store/redis-resp.test.ts
 * holds them byte-equal to ioredis' own encoding).
 *
 * A script whose arguments are many declares their layout here once, by
 * name; its builder writes them by those names and the script reads them by
 * the same names: a `--- @argv "<name>"` line in the script stands for the
 * Lua tables luaArgv() makes from the declaration (the script loader pastes
 * them in), each field's position within its section.
 */

/** One script argument as ioredis takes it. */
export type Arg = string | number;

/**
 * A run of arguments already in RESP (the Redis protocol): `count`
 * arguments, each "$<byte length>\r\n<bytes>\r\n", as ioredis writes them.
 */
export interface Resp {
  count: number;
  text: string;
}

/** One argument in RESP; numbers as ioredis sends them (String(n)). */
export function bulk(arg: Arg): string {
  const text = typeof arg === "string" ? arg : String(arg);
  return `$${Buffer.byteLength(text, "utf8")}\r\n${text}\r\n`;
}

/** Arguments in RESP. */
export function respOf(args: readonly Arg[]): Resp {
  let text = "";
  for (const arg of args) text += bulk(arg);
  return { count: args.length, text };
}

/** Arguments encoded once to be written many times: as ioredis takes them and in RESP. */
export interface EncodedArgs {
  args: readonly Arg[];
  resp: string;
}

/** `args` encoded once. */
export function encodedArgs(args: readonly Arg[]): EncodedArgs {
  return { args, resp: respOf(args).text };
}

/** Where a script's builder writes its arguments, in order. */
export interface ArgWriter {
  arg(value: Arg): void;
  encoded(run: EncodedArgs): void;
}

/** Collects the arguments as ioredis takes them. */
export class ArgList implements ArgWriter {
  readonly args: Arg[] = [];

  arg(value: Arg): void {
    this.args.push(value);
  }

  encoded(run: EncodedArgs): void {
    for (const arg of run.args) this.args.push(arg);
  }
}

/** Writes the arguments in RESP. */
export class RespText implements ArgWriter, Resp {
  count = 0;
  text = "";

  arg(value: Arg): void {
    this.count++;
    this.text += bulk(value);
  }

  encoded(run: EncodedArgs): void {
    this.count += run.args.length;
    this.text += run.resp;
  }
}

/** One section of a script's ARGV: its fields' names, in order. */
export type ArgvSection = readonly string[];

/** A section's values by field name; undefined only for a trailing optional field (left out). */
export type SectionValues<S extends ArgvSection> = { [K in S[number]]: Arg | undefined };

/** Writes one section's values in the order its declaration names them; stops at the first undefined (trailing optional fields). */
export function writeSection<S extends ArgvSection>(out: ArgWriter, section: S, values: SectionValues<S>): void {
  for (let i = 0; i < section.length; i++) {
    const value = values[section[i] as S[number]];
    if (value === undefined) return;
    out.arg(value);
  }
}

/**
 * A section with its `Fixed` fields (the same for many calls) encoded once,
 * consecutive ones merged into one run, the others named to be given per
 * call (writeTemplate).
 */
export interface SectionTemplate<S extends ArgvSection, Fixed extends S[number]> {
  parts: ReadonlyArray<EncodedArgs | Exclude<S[number], Fixed>>;
}

/** `section` with the `fixed` values encoded, after `before` (arguments written just ahead of the section, such as KEYS). */
export function sectionTemplate<S extends ArgvSection, Fixed extends S[number]>(
  section: S,
  fixed: Record<Fixed, Arg>,
  before: readonly Arg[] = [],
): SectionTemplate<S, Fixed> {
  const parts: Array<EncodedArgs | Exclude<S[number], Fixed>> = [];
  let run: Arg[] = [...before];
  for (const name of section as readonly S[number][]) {
    if (name in fixed) {
      run.push(fixed[name as Fixed]);
      continue;
    }
    if (run.length > 0) parts.push(encodedArgs(run));
    run = [];
    parts.push(name as Exclude<S[number], Fixed>);
  }
  if (run.length > 0) parts.push(encodedArgs(run));
  return { parts };
}

/** Writes a template's section with the per-call `values`; stops at the first undefined (trailing optional fields). */
export function writeTemplate<S extends ArgvSection, Fixed extends S[number]>(
  out: ArgWriter,
  template: SectionTemplate<S, Fixed>,
  values: { [K in Exclude<S[number], Fixed>]: Arg | undefined },
): void {
  const { parts } = template;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i];
    if (typeof part === "object") {
      out.encoded(part);
      continue;
    }
    const value = values[part];
    if (value === undefined) return;
    out.arg(value);
  }
}

/**
 * append-12.lua's ARGV, in order: `head`; then `event` once per event;
 * `tenancy`; `cap` once per app with its own events cap; `stateLimits`;
 * per event its state changes (a count, then 3 per change:
 * includes/state.lua); `tail`, whose last field (the expected incarnation)
 * is there only when the caller expects one. The script header says what
 * each field means.
 */
export const APPEND_ARGV = {
  head: [
    "sessionId",
    "sessionIdJson",
    "expectedSeq",
    "now",
    "maxSessionEvents",
    "recentCap",
    "memberPrefix",
    "channel",
    "eventCount",
  ],
  event: ["eventId", "fingerprint", "timestamp", "encoded"],
  tenancy: ["noticeMaxBytes", "appName", "userId", "dedupeWindowMs", "dedupeMaxIds", "capCount"],
  cap: ["app", "maxEvents"],
  stateLimits: ["maxStateKeys", "maxStateBytes"],
  tail: ["outboxPrefix", "ingestBase", "publish", "incarnation"],
} as const satisfies Record<string, ArgvSection>;

/** The ARGV layouts scripts read by name, by script name (`--- @argv "<name>"`). */
export const ARGV_LAYOUTS: Record<string, Record<string, ArgvSection>> = { append: APPEND_ARGV };

/**
 * A layout as Lua: per section a table of its fields' positions within it
 * (1-based) and its `size`, named after the section in capitals
 * (stateLimits: STATE_LIMITS), e.g. `local HEAD = {size = 9, sessionId = 1, ...}`.
 * A section that follows a repeated one starts where that one ends, which
 * the script counts.
 */
export function luaArgv(layout: Record<string, ArgvSection>): string {
  return Object.entries(layout)
    .map(([section, fields]) => {
      const name = section.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase();
      const positions = fields.map((field, i) => `${field} = ${i + 1}`).join(", ");
      return `local ${name} = {size = ${fields.length}, ${positions}}`;
    })
    .join("\n");
}
