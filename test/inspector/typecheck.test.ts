/**
 * The inspector is type-checked with its own tsconfig (browser DOM types,
 * bundler resolution), which the root `tsc` step does not cover; Vite only
 * strips types, so this is where a type error in inspector/ fails the build.
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../support/engram.js";

describe("inspector sources", () => {
  it("type-check with inspector/tsconfig.json", async () => {
    const tsc = path.join(REPO_ROOT, "node_modules/typescript/bin/tsc");
    const result = await promisify(execFile)(
      process.execPath,
      [tsc, "-p", path.join(REPO_ROOT, "inspector/tsconfig.json")],
      { cwd: REPO_ROOT },
    ).then(
      () => ({ code: 0, out: "" }),
      (err: { code?: number; stdout?: string }) => ({ code: err.code ?? 1, out: err.stdout ?? String(err) }),
    );
    expect(result.out).toBe("");
    expect(result.code).toBe(0);
  }, 120_000);
});
