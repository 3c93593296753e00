/**
 * Loading and running the Redis store's Lua scripts: the loader (a script
 * is src/store/redis/scripts/<name>-<key count>.lua; a line
 * `--- @include "<name>"` stands for includes/<name>.lua, pasted in once per
 * script, as bullmq does, and `--- @argv "<name>"` for the ARGV layout
 * script-args.ts declares), the runner of their typed wrappers (scripts.ts),
 * the one-node fast path that writes a call's EVALSHA in RESP itself, and
 * WAIT after writes (MEMORY_REDIS_WAIT_REPLICAS).
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { Command, type Redis } from "ioredis";
import { MemoryError } from "../../errors.js";
import { isCluster, type RedisClient } from "../../backends/redis.js";
import { ARGV_LAYOUTS, bulk, luaArgv, respOf, type Arg, type Resp } from "./script-args.js";
import type { Reply, Script, ScriptContext } from "./scripts.js";

/** Where the script files are (copied next to the compiled code by scripts/build.mjs). */
export const SCRIPTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "scripts");

/** One script as the store sends it: its text with includes resolved, its file's name and its key count. */
export interface ScriptText {
  file: string;
  lua: string;
  /** Undefined for <name>-n.lua, whose caller passes the key count first. */
  numberOfKeys: number | undefined;
}

/**
 * Every script in `dir` (<name>-<key count>.lua) by name, includes resolved:
 * the text the store sends, byte for byte.
 *
 * Its comments must not hold "[[" inside a --[[ ... ]] block: Redis' own
 * build of Lua (LUA_COMPAT_LSTR 1), that of the official images and Redis
 * Stack, refuses the whole script for it, while Debian's Lua accepts it
 * (test/store/redis-scripts.test.ts loads each on both).
 */
export function loadScripts(dir = SCRIPTS_DIR): Map<string, ScriptText> {
  const scripts = new Map<string, ScriptText>();
  for (const file of readdirSync(dir)) {
    const match = /^([a-z]+)-(\d+|n)\.lua$/.exec(file);
    if (!match) continue;
    const lua = resolveArgv(resolveIncludes(readFileSync(path.join(dir, file), "utf8"), dir, file), file);
    scripts.set(match[1], { file, lua, numberOfKeys: match[2] === "n" ? undefined : Number(match[2]) });
  }
  return scripts;
}

/** The script with its `--- @argv "<name>"` line replaced by that layout's Lua (script-args.ts luaArgv). */
function resolveArgv(lua: string, file: string): string {
  return lua.replace(/^--- @argv "([a-z]+)"[ \t]*$/gm, (_line, name: string) => {
    const layout = ARGV_LAYOUTS[name];
    if (!layout) throw new Error(`${file} reads the ARGV layout "${name}", which script-args.ts does not declare`);
    return luaArgv(layout);
  });
}

/** The script with every `--- @include "<name>"` line replaced by includes/<name>.lua (each at most once, nested ones too). */
function resolveIncludes(lua: string, dir: string, file: string, included = new Set<string>()): string {
  return lua.replace(/^--- @include "([a-z-]+)"[ \t]*$/gm, (_line, name: string) => {
    if (included.has(name)) return `-- (includes/${name}.lua: already included)`;
    included.add(name);
    let text: string;
    try {
      text = readFileSync(path.join(dir, "includes", `${name}.lua`), "utf8");
    } catch (err) {
      throw new Error(`${file} includes "${name}", but includes/${name}.lua cannot be read`, { cause: err });
    }
    return resolveIncludes(text.trimEnd(), dir, `includes/${name}.lua`, included);
  });
}

/** MEMORY_REDIS_WAIT_REPLICAS: replicas that must have each write script's effects before it counts as done. */
export interface WaitForReplicas {
  /** 0: no WAIT. */
  replicas: number;
  /** WAIT's own timeout; shorter than the command timeout, so the shortfall is what answers. */
  timeoutMs: number;
}

/** Tries of a script + WAIT pipeline refused by a cluster whose slots are moving (MOVED, ASK, TRYAGAIN: the script did not run). */
const REDIRECTED_TRIES = 5;

/** The scripts defined on one connection, run through their typed wrappers. */
export class RedisScripts {
  private readonly commands = new Map<string, (...keysAndArgs: Arg[]) => Promise<Reply>>();
  /** One node without WAIT: each script's text, SHA1 and key count in RESP, for commands written here (runRaw). */
  private readonly raw = new Map<string, { evalsha: string; evalHead: string; keyCount: string; keyArgs: number }>();

  constructor(
    private readonly redis: RedisClient,
    private readonly context: ScriptContext,
    private readonly wait: WaitForReplicas = { replicas: 0, timeoutMs: 0 },
  ) {
    for (const [name, { lua, numberOfKeys }] of loadScripts()) {
      // defineCommand runs EVALSHA and falls back to EVAL (loading it) when Redis does not know the script yet.
      redis.defineCommand(`engram_${name}`, numberOfKeys === undefined ? { lua } : { numberOfKeys, lua });
      for (const variant of [`engram_${name}`, `engram_${name}Buffer`]) {
        this.commands.set(
          variant,
          (redis as unknown as Record<string, (...keysAndArgs: Arg[]) => Promise<Reply>>)[variant].bind(redis),
        );
      }
      if (!isCluster(redis) && wait.replicas === 0) {
        const sha = createHash("sha1").update(lua).digest("hex");
        this.raw.set(name, {
          evalsha: `$7\r\nevalsha\r\n${bulk(sha)}`,
          evalHead: `$4\r\neval\r\n${bulk(lua)}`,
          keyCount: numberOfKeys === undefined ? "" : bulk(numberOfKeys),
          keyArgs: numberOfKeys === undefined ? 0 : 1,
        });
      }
    }
  }

  /**
   * Runs `script` with `input`; its decoded reply. With WAIT configured, a
   * writing script is followed by WAIT (runThenWait).
   */
  async run<Input, Result>(script: Script<Input, Result>, input: Input): Promise<Result> {
    const raw = this.raw.get(script.name);
    if (raw) {
      const args = script.resp ? script.resp(this.context, input) : respOf(script.args(this.context, input));
      return script.decode(await this.runRaw(raw, args, script.buffers === true), input);
    }
    // defineCommand also made `<name>Buffer`, whose reply keeps bulk strings as Buffers.
    const name = `engram_${script.name}${script.buffers ? "Buffer" : ""}`;
    const command = this.commands.get(name);
    if (!command) throw new Error(`no script file for ${script.name} in ${SCRIPTS_DIR}`);
    const args = script.args(this.context, input);
    if (script.readOnly || this.wait.replicas === 0) return script.decode(await command(...args), input);
    return script.decode(await runThenWait(this.redis, name, args, this.wait), input);
  }

  /**
   * One node: EVALSHA written here in RESP, the bytes ioredis' defined
   * command writes, without its per-argument work (flattening, converting
   * and framing each argument again, a second promise for the fallback);
   * EVAL (which loads the script) when Redis does not know it. The command
   * still goes through the client: its queue, timeout, reconnect and
   * re-sending of unanswered commands are unchanged.
   */
  private async runRaw(
    raw: { evalsha: string; evalHead: string; keyCount: string; keyArgs: number },
    args: Resp,
    buffers: boolean,
  ): Promise<Reply> {
    const count = `*${args.count + raw.keyArgs + 2}\r\n`;
    const client = this.redis as Redis;
    try {
      return (await client.sendCommand(
        new RespCommand(count + raw.evalsha + raw.keyCount + args.text, buffers),
      )) as Reply;
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith("NOSCRIPT")) throw err;
      return (await client.sendCommand(
        new RespCommand(count + raw.evalHead + raw.keyCount + args.text, buffers),
      )) as Reply;
    }
  }
}

/** A command whose bytes are already RESP (RedisScripts.runRaw); its reply as strings, as a defined command's, or as Buffers (`<name>Buffer`'s). */
class RespCommand extends Command {
  constructor(
    private readonly resp: string,
    buffers: boolean,
  ) {
    super("evalsha", [], { replyEncoding: buffers ? null : "utf8" });
  }

  override toWritable(): string {
    return this.resp;
  }
}

/**
 * Runs the command `command` (a script defineCommand made) with `keysAndArgs`
 * and, when `wait.replicas` > 0, WAIT in the same pipeline, so on a cluster
 * it reaches the node that ran the script; a cluster's refusal before the
 * script ran (slots moving) is tried again. UNAVAILABLE naming how many
 * replicas acknowledged when fewer than asked: the write may have happened,
 * and a retry with the same ids is idempotent. Every writing script of the
 * store (sessions and memories) goes through here.
 */
export async function runThenWait(
  redis: RedisClient,
  command: string,
  keysAndArgs: Array<Arg | Buffer>,
  wait: WaitForReplicas,
): Promise<Reply> {
  const runner = (target: object) =>
    (target as Record<string, (...a: Array<Arg | Buffer>) => unknown>)[command].bind(target);
  if (wait.replicas === 0) return (await runner(redis)(...keysAndArgs)) as Reply;
  for (let attempt = 1; ; attempt++) {
    const pipeline = redis.pipeline();
    runner(pipeline)(...keysAndArgs);
    pipeline.wait(wait.replicas, wait.timeoutMs);
    const [[scriptError, reply], [waitError, acknowledged]] = (await pipeline.exec()) as Array<[Error | null, unknown]>;
    if (scriptError) {
      const redirected = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(scriptError.message);
      if (!redirected || !isCluster(redis) || attempt >= REDIRECTED_TRIES) throw scriptError;
      redis.refreshSlotsCache();
      await sleep(100 * attempt);
      continue;
    }
    if (waitError) throw waitError;
    if (Number(acknowledged) < wait.replicas) {
      throw new MemoryError(
        "UNAVAILABLE",
        `redis unavailable: the write reached ${Number(acknowledged)} of the ${wait.replicas} replicas MEMORY_REDIS_WAIT_REPLICAS asks for within ${wait.timeoutMs} ms; it may have been applied (retrying with the same ids is safe)`,
      );
    }
    return reply as Reply;
  }
}
