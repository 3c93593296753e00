/**
 * `engram memories list|search|forget`: the long-term memories of a scope
 * (an app and any of user, agent, session) newest first, ranked by a query,
 * or forgotten by ids or by scope (a scope needs --yes: it may be many).
 */
import { Command, InvalidArgumentError, Option } from "commander";
import type { Memory, MemoryScope, ScopeMatch } from "@engram-memory/client";
import { connect, pagesFrom, UsageError, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { iso, memoryJson, oneLine, positiveInt, printJson, table } from "../output.js";
import { collect } from "./events.js";

interface ScopeOptions extends ConnectionOptions {
  app: string;
  user?: string;
  agent?: string;
  session?: string;
  scopeMatch?: ScopeMatch;
}

interface FilterOptions extends ScopeOptions {
  topic: string[];
  asOf?: Date;
  includeInvalid?: boolean;
}

interface ListOptions extends FilterOptions {
  limit: number;
  pageToken?: string;
  all?: boolean;
}

interface SearchOptions extends FilterOptions {
  query: string;
  topK?: number;
}

interface ForgetOptions extends ScopeOptions {
  yes?: boolean;
}

/** A commander parser for an ISO 8601 time, naming the option in its message. */
function isoTime(name: string): (value: string) => Date {
  return (value) => {
    const date = new Date(value);
    if (!/^\d{4}-\d{2}-\d{2}/.test(value) || Number.isNaN(date.getTime())) {
      throw new InvalidArgumentError(
        `${name}: expected an ISO 8601 time such as 2024-05-01T12:00:00Z, got ${JSON.stringify(value)}`,
      );
    }
    return date;
  };
}

/** Adds the scope options every memories subcommand takes. */
function withScopeOptions(cmd: Command, defaultMatch: string): Command {
  return cmd
    .requiredOption("--app <name>", "the app_name")
    .option("--user <id>", "scope: this user_id")
    .option("--agent <id>", "scope: this agent_id")
    .option("--session <id>", "scope: this session_id")
    .addOption(
      new Option("--scope-match <match>", `how the scope selects memories (default ${defaultMatch})`).choices([
        "visible",
        "within",
        "exact",
      ]),
    );
}

/** Adds the filters list and search share. */
function withFilterOptions(cmd: Command): Command {
  return cmd
    .option("--topic <topic>", "only memories with this topic (repeatable: any of them)", collect, [])
    .option("--as-of <time>", "what was valid at that time (ISO 8601)", isoTime("--as-of"))
    .option("--include-invalid", "also memories no longer valid (superseded or expired)");
}

function scopeOf(opts: ScopeOptions): MemoryScope {
  return {
    appName: opts.app,
    userId: opts.user,
    agentId: opts.agent,
    sessionId: opts.session,
    scopeMatch: opts.scopeMatch,
  };
}

function filterOf(opts: FilterOptions) {
  if (opts.asOf && opts.includeInvalid) throw new UsageError("--as-of and --include-invalid cannot be combined");
  return { ...scopeOf(opts), topics: opts.topic, asOf: opts.asOf, includeInvalid: opts.includeInvalid };
}

/** The scope and validity columns of a memory; "-" for unset, so every cell holds a word. */
function memoryCells(m: Memory): string[] {
  return [
    m.memoryId,
    m.userId ?? "-",
    m.agentId ?? "-",
    m.sessionId ?? "-",
    iso(m.validFrom),
    m.invalidAt ? iso(m.invalidAt) : "-",
    oneLine(m.text, 60),
  ];
}
const MEMORY_HEAD = ["MEMORY", "USER", "AGENT", "SESSION", "VALID FROM", "INVALID AT", "TEXT"];

/** Registers the subcommand and its three actions. */
export function register(program: Command): void {
  const memories = program.command("memories").description("long-term memories of a scope: list, search, forget");

  withConnectionOptions(
    withFilterOptions(
      withScopeOptions(
        memories.command("list").description("one page of a scope's memories, newest first (or --all)"),
        "within",
      ),
    )
      .option("--limit <n>", "memories per page (at most 1000)", positiveInt("--limit", 1), 50)
      .option("--page-token <token>", "continue from a previous page")
      .option("--all", "every page"),
  ).action(async (opts: ListOptions) => {
    const filter = filterOf(opts);
    const client = await connect(opts);
    try {
      const found: Memory[] = [];
      let pageToken = "";
      for await (const page of pagesFrom(opts.pageToken ?? "", opts.all === true, (pageToken) =>
        client.listMemoriesPage({ ...filter, pageSize: opts.limit, pageToken }),
      )) {
        found.push(...page.memories);
        pageToken = opts.all ? "" : page.nextPageToken;
      }
      if (opts.json) {
        printJson({ memories: found.map(memoryJson), next_page_token: pageToken });
        return;
      }
      if (found.length === 0) process.stderr.write("no memories\n");
      else process.stdout.write(`${table(MEMORY_HEAD, found.map(memoryCells))}\n`);
      if (pageToken)
        process.stderr.write(`more: engram memories list --page-token ${pageToken} (with the same filters)\n`);
    } finally {
      client.close();
    }
  });

  withConnectionOptions(
    withFilterOptions(
      withScopeOptions(
        memories.command("search").description("a scope's memories ranked by relevance to a query, best first"),
        "visible",
      ),
    )
      .option("--query <text>", "text to rank by (empty: by importance and recency)", "")
      .option("--top-k <n>", "most results, 1..100 (default 10)", positiveInt("--top-k", 1)),
  ).action(async (opts: SearchOptions) => {
    const filter = filterOf(opts);
    const client = await connect(opts);
    try {
      const results = await client.searchMemories({ ...filter, query: opts.query, topK: opts.topK });
      if (opts.json) {
        printJson({
          results: results.map((r) => ({
            score: r.score,
            lexical_score: r.lexicalScore,
            vector_score: r.vectorScore,
            memory: memoryJson(r.memory),
          })),
        });
        return;
      }
      if (results.length === 0) {
        process.stderr.write("no memories\n");
        return;
      }
      const rows = results.map((r) => [r.score.toFixed(4), ...memoryCells(r.memory)]);
      process.stdout.write(`${table(["SCORE", ...MEMORY_HEAD], rows)}\n`);
    } finally {
      client.close();
    }
  });

  withConnectionOptions(
    withScopeOptions(
      memories
        .command("forget")
        .description("forget memories by id, or (with --yes) every memory a scope selects")
        .argument("[memory-id...]", "the memories to forget"),
      "within",
    ).option("--yes", "confirm forgetting by scope (every memory the scope selects)"),
  ).action(async (ids: string[], opts: ForgetOptions) => {
    const scoped =
      opts.user !== undefined ||
      opts.agent !== undefined ||
      opts.session !== undefined ||
      opts.scopeMatch !== undefined;
    if (ids.length > 0 && scoped)
      throw new UsageError("give memory ids or a scope (--user, --agent, --session, --scope-match), not both");
    if (ids.length === 0 && !scoped) {
      throw new UsageError(
        "name memory ids, or a scope (--user, --agent, --session; --scope-match within forgets the whole app) with --yes",
      );
    }
    if (ids.length === 0 && !opts.yes) {
      throw new UsageError(
        "forgetting by scope removes every memory it selects: add --yes to confirm (or list them first with `engram memories list`)",
      );
    }
    const client = await connect(opts);
    try {
      const deleted = await client.deleteMemories(
        ids.length > 0 ? { appName: opts.app, memoryIds: ids } : scopeOf(opts),
      );
      if (opts.json) printJson({ deleted_count: deleted });
      else process.stdout.write(`forgot ${deleted} memories\n`);
    } finally {
      client.close();
    }
  });
}
