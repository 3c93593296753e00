// The root `prepare` script: builds the inspector (inspector/dist) and the
// server, CLI and TypeScript client (dist/) after `npm ci`/`npm install`.
//
// Except when `npm exec`/`npx` runs it. Run in a project whose own package.json
// declares the asked-for bin (`npx engram` in this checkout), npm links the
// project into its npx cache to set up the bin, and that link runs `prepare`
// in the checkout itself: a full rebuild (tens of seconds) before the first
// `npx engram` answers. The checkout was already built by `npm ci`, and the
// bin never runs a stale build (src/cli/bin.mjs runs the sources through tsx
// when dist/ is older than them), so the rebuild buys nothing there.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

if (process.env.npm_command === "exec") process.exit(0);

/** Runs one of the repository's build scripts with this Node, failing the install when it fails. */
function build(script, ...args) {
  execFileSync(process.execPath, [fileURLToPath(new URL(script, import.meta.url)), ...args], { stdio: "inherit" });
}

build("../inspector/scripts/build.mjs");
// --optional: an install without dev dependencies (no TypeScript) goes on without a build.
build("./build.mjs", "--optional");
