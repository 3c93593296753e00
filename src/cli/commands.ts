/**
 * Every subcommand of `engram`, in the order `engram --help` lists them. A
 * new subcommand is one module exporting `register(program)`, added here.
 */
import type { Command } from "commander";
import * as context from "./commands/context.js";
import * as erase from "./commands/erase.js";
import * as events from "./commands/events.js";
import * as exportSessions from "./commands/export.js";
import * as importSessions from "./commands/import.js";
import * as keys from "./commands/keys.js";
import * as memories from "./commands/memories.js";
import * as serve from "./commands/serve.js";
import * as sessions from "./commands/sessions.js";
import * as stats from "./commands/stats.js";
import * as tail from "./commands/tail.js";

/** A subcommand module. */
export interface Subcommand {
  register(program: Command): void;
}

/** The subcommand table. */
export const SUBCOMMANDS: readonly Subcommand[] = [
  serve,
  sessions,
  events,
  tail,
  context,
  memories,
  stats,
  exportSessions,
  importSessions,
  erase,
  keys,
];
