/**
 * `engram keys <create|list|revoke> ...`: API key management in the
 * configured backend (src/auth/keys-cli.ts parses its own arguments; they
 * pass through untouched).
 */
import { Command } from "commander";

/** Registers the subcommand. */
export function register(program: Command): void {
  program
    .command("keys")
    .description("create, list and revoke API keys (MEMORY_AUTH=true), in the configured backend")
    .argument(
      "[args...]",
      "create --app APP --role read|write|admin [--user U] | list | revoke ID   (engram keys --help)",
    )
    .helpOption(false)
    .allowUnknownOption()
    .passThroughOptions()
    .action(async (args: string[]) => {
      // Loaded here, not at the top: it brings in the store drivers (ioredis, pg), which every
      // other command, `engram --help` included, would otherwise load at start-up for nothing.
      const { runKeysCommand } = await import("../../auth/keys-cli.js");
      process.exitCode = await runKeysCommand(args);
    });
}
