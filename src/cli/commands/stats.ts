/** `engram stats`: totals over the store. */
import { Command } from "commander";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { printJson, table } from "../output.js";

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(program.command("stats").description("totals over the store")).action(
    async (opts: ConnectionOptions) => {
      const memory = await connect(opts);
      try {
        const s = await memory.getMemoryStats();
        if (opts.json) {
          printJson({
            total_sessions: s.totalSessions,
            total_events: s.totalEvents,
            avg_events_per_session: s.avgEventsPerSession,
            backend: s.backend,
          });
          return;
        }
        const rows = [
          ["sessions", s.totalSessions],
          ["events", s.totalEvents],
          ["events per session", s.avgEventsPerSession.toFixed(1)],
          ["backend", s.backend],
        ];
        process.stdout.write(`${table(["STAT", "VALUE"], rows)}\n`);
      } finally {
        memory.close();
      }
    },
  );
}
