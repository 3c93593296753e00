/** `engram events <id>`: a session's events in seq order. */
import { Command } from "commander";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { eventJson, iso, oneLine, positiveInt, printJson, table } from "../output.js";

interface EventsOptions extends ConnectionOptions {
  type: string[];
  after?: number;
  limit?: number;
  tail?: number;
}

/** Repeatable option values. */
export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("events")
      .description("a session's events in seq order")
      .argument("<session-id>", "the session")
      .option("--type <event-type>", "only this event type (repeatable)", collect, [])
      .option("--after <seq>", "only events after this seq", positiveInt("--after"))
      .option("--limit <n>", "at most this many events", positiveInt("--limit", 1))
      .option("--tail <n>", "only the newest n events", positiveInt("--tail", 1)),
  ).action(async (sessionId: string, opts: EventsOptions) => {
    const memory = await connect(opts);
    try {
      const events = await memory.getSessionEvents(sessionId, {
        eventTypes: opts.type,
        afterSeq: opts.after,
        limit: opts.limit,
        tail: opts.tail,
      });
      if (opts.json) {
        printJson(events.map(eventJson));
        return;
      }
      if (events.length === 0) {
        process.stderr.write("no events\n");
        return;
      }
      const rows = events.map((e) => [e.seq, iso(e.timestamp), e.eventType, e.eventId, oneLine(e.content, 70)]);
      process.stdout.write(`${table(["SEQ", "TIME", "TYPE", "EVENT ID", "CONTENT"], rows)}\n`);
    } finally {
      memory.close();
    }
  });
}
