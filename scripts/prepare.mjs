// The root `prepare` script: builds the inspector (inspector/dist) and the
// server, CLI and TypeScript client (dist/) after `npm ci`/`npm install`.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/** Runs one of the repository's build scripts with this Node, failing the install when it fails. */
function build(script, ...args) {
  execFileSync(process.execPath, [fileURLToPath(new URL(script, import.meta.url)), ...args], { stdio: "inherit" });
}

build("../inspector/scripts/build.mjs");
// --optional: an install without dev dependencies (no TypeScript) goes on without a build.
build("./build.mjs", "--optional");
