/** `engram erase`: DeleteUserData, every session and event of one user of one app. */
import { Command } from "commander";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { printJson } from "../output.js";

interface EraseOptions extends ConnectionOptions {
  app: string;
  user: string;
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("erase")
      .description("erase one user of one app: every session, event and memory of theirs (safe to run again)")
      .requiredOption("--app <name>", "the user's app_name")
      .requiredOption("--user <id>", "the user_id to erase"),
  ).action(async (opts: EraseOptions) => {
    const memory = await connect(opts);
    try {
      const erased = await memory.deleteUserData(opts.app, opts.user);
      if (opts.json) {
        printJson({
          removed_sessions: erased.removedSessions,
          removed_events: erased.removedEvents,
          removed_memories: erased.removedMemories,
        });
        return;
      }
      process.stdout.write(
        `erased ${erased.removedSessions} sessions, ${erased.removedEvents} events, ${erased.removedMemories} memories\n`,
      );
    } finally {
      memory.close();
    }
  });
}
