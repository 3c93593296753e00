#!/usr/bin/env node
// The `engram` command (package.json "bin"): runs the TypeScript CLI through tsx,
// which the server already uses to run its sources.
import { tsImport } from "tsx/esm/api";

await tsImport("./main.ts", import.meta.url);
