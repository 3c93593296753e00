/** `engram sessions`: one page of sessions (or --all), filtered by app and user. */
import { Command } from "commander";
import type { Session } from "@engram-memory/client";
import { connect, pagesFrom, withConnectionOptions, type ConnectionOptions } from "../connection.js";
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
      const { sessionFromPb } = await import("../wire.js");
      const sessions: Session[] = [];
      let pageToken = "";
      const filter = { appName: opts.app, userId: opts.user, pageSize: opts.limit };
      for await (const page of pagesFrom(opts.pageToken ?? "", opts.all === true, (pageToken) =>
        memory.rpc.listSessions({ ...filter, pageToken }),
      )) {
        sessions.push(...page.sessions.map(sessionFromPb));
        pageToken = opts.all ? "" : page.nextPageToken;
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
