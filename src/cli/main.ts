/**
 * `engram`: the command line of Engram — run the server, look at sessions and
 * events, follow a session live, see the context a model call would get,
 * and move sessions between stores as JSON Lines.
 */
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { SUBCOMMANDS } from "./commands.js";
import { UsageError } from "./connection.js";

const { version } = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
  version: string;
};

/** Exit statuses: 1 a failed call or operation, 2 a usage mistake. */
const EXIT_FAILED = 1;
const EXIT_USAGE = 2;

/** The program with every subcommand registered. */
export function buildProgram(): Command {
  const program = new Command("engram")
    .description(
      "Engram, the memory server for AI agents: serve it, inspect sessions, follow them live, export and import them",
    )
    .version(version)
    .enablePositionalOptions()
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  for (const sub of SUBCOMMANDS) sub.register(program);
  for (const cmd of program.commands) cmd.exitOverride();
  return program;
}

/** Runs the CLI on `argv` (without node and the script) and sets the exit status. */
export async function runCli(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv, { from: "user" });
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has already printed the message (and help); 0 for --help and --version.
      process.exitCode = err.exitCode === 0 ? 0 : EXIT_USAGE;
      return;
    }
    if (err instanceof UsageError) {
      process.stderr.write(`engram: ${err.message}\n`);
      process.exitCode = EXIT_USAGE;
      return;
    }
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`engram: ${message}\n`);
    process.exitCode = EXIT_FAILED;
  }
}

// A reader that stops early (`engram tail x --json | head -1`) closes the pipe: that ends us quietly.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code === "EPIPE") process.exit(0);
  throw err;
});

await runCli(process.argv.slice(2));
