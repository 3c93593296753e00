/**
 * The server's version: package.json's, read next to the sources or the
 * compiled build (src/ and dist/ both sit one level below it).
 */
import { readFileSync } from "node:fs";

/** The package version, e.g. "0.1.0". */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;
