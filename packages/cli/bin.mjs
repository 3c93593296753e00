#!/usr/bin/env node
// The `engram` command. It lives in a package of its own, not in the server's
// package.json "bin": npm runs a bin that the current project itself declares
// by linking the project into its npx cache and reading its whole dependency
// tree on every `npx engram`, while a bin a dependency or workspace declares
// is run straight from node_modules/.bin.
//
// The CLI's code is the server package's (src/cli/bin.mjs). In a checkout this
// package is the workspace packages/cli, two folders below it; installed, the
// server package (which depends on this one) sits beside it in node_modules.
import { existsSync } from "node:fs";

const SERVER = "engram-memory-server";
const inCheckout = new URL("../../src/cli/bin.mjs", import.meta.url);

if (existsSync(inCheckout)) {
  await import(inCheckout.href);
} else {
  let cli;
  try {
    cli = import.meta.resolve(`${SERVER}/src/cli/bin.mjs`);
  } catch {
    console.error(`engram: the ${SERVER} package is not installed beside @engram-memory/cli: npm install ${SERVER}`);
    process.exit(2);
  }
  await import(cli);
}
