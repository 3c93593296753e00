/** `engram sessions`: one page of sessions (or --all), filtered by app and user. */
import { Command } from "commander";
import type { Session } from "@engram-memory/client";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { iso, positiveInt, printJson, sessionJson, table } from "../output.js";

interface SessionsOptions extends ConnectionOptions {
  app?: string;
  user?: string;
  limit: number;
  pageToken?: string;
  all?: boolean;
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("sessions")
      .description("list sessions in session_id order")
      .option("--app <name>", "only sessions of this app_name")
      .option("--user <id>", "only sessions of this user_id")
      .option("--limit <n>", "sessions per page (at most 1000)", positiveInt("--limit", 1), 50)
      .option("--page-token <token>", "continue from a previous page")
      .option("--all", "every page"),
  ).action(async (opts: SessionsOptions) => {
    const memory = await connect(opts);
    try {
      const sessions: Session[] = [];
      let pageToken = opts.pageToken ?? "";
      // Bounded: every page advances the cursor; the cap guards against a server that would not.
      for (let pages = 0; pages < 1_000_000; pages++) {
        const res = await memory.rpc.listSessions({
          appName: opts.app,
          userId: opts.user,
          pageSize: opts.limit,
          pageToken,
        });
        const { sessionFromPb } = await import("../wire.js");
        sessions.push(...res.sessions.map(sessionFromPb));
        if (!opts.all || !res.nextPageToken || res.nextPageToken === pageToken) {
          pageToken = opts.all ? "" : res.nextPageToken;
          break;
        }
        pageToken = res.nextPageToken;
      }
      if (opts.json) {
        printJson({ sessions: sessions.map(sessionJson), next_page_token: pageToken });
        return;
      }
      if (sessions.length === 0) {
        process.stderr.write("no sessions\n");
      } else {
        const rows = sessions.map((s) => [s.sessionId, s.appName, s.userId, s.eventCount, s.headSeq, iso(s.updatedAt)]);
        process.stdout.write(`${table(["SESSION", "APP", "USER", "EVENTS", "HEAD", "UPDATED"], rows)}\n`);
      }
      if (pageToken) process.stderr.write(`more: engram sessions --page-token ${pageToken}\n`);
    } finally {
      memory.close();
    }
  });
}
