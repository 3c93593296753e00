#!/usr/bin/env node
// The `engram` command (the bin of packages/cli runs it): runs the compiled CLI (dist/, built
// by `npm ci`, `npm run build` or `npm start`) when it is current, which starts
// in a fraction of the time; otherwise the TypeScript sources through tsx, so
// the command never runs code older than the checkout.
import { buildIsStale } from "./build-state.mjs";

if (!buildIsStale()) {
  await import("../../dist/cli/main.js");
} else {
  const { tsImport } = await import("tsx/esm/api");
  await tsImport("./main.ts", import.meta.url);
}
