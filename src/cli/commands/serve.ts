/**
 * `engram serve [flags]`: runs the server in this process, exactly as
 * `npm start` does; every flag and environment variable of the server's
 * configuration applies (`engram serve --help` lists them).
 */
import { Command } from "commander";
import { settingsList } from "../../settings.js";

/** Registers the subcommand. */
export function register(program: Command): void {
  const settings = settingsList().map(
    (s) =>
      `  --${s.flag} <value>`.padEnd(34) +
      `${s.env}${s.default !== undefined ? ` (default ${s.default})` : ""}: ${s.doc}`,
  );
  program
    .command("serve")
    .description("run the Engram server (gRPC, Connect, REST and the inspector on one port)")
    .argument("[flags...]", "server settings, e.g. --port 8000 --memory-type redis")
    .helpOption("-h, --help", "show the server settings")
    .allowUnknownOption()
    .passThroughOptions()
    .addHelpText("after", `\nServer settings (flags win over environment variables):\n${settings.join("\n")}\n`)
    .action(async (flags: string[]) => {
      // The server's start-up reads its flags from process.argv, as under `npm start`.
      process.argv = [process.argv[0]!, "engram serve", ...flags];
      await import("../../main.js");
    });
}
