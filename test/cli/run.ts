/**
 * Runs the real `engram` binary (src/cli/bin.mjs, which the bin of packages/cli runs) as a
 * child process, the way a person or a script would.
 */
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { REPO_ROOT } from "../support/engram.js";

/** The CLI's entry, as the `engram` bin of packages/cli runs it. */
export const ENGRAM_BIN = path.join(REPO_ROOT, "src/cli/bin.mjs");

/** What a finished run printed and its exit status. */
export interface EngramRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Environment without the caller's ENGRAM_* settings, so each test says what it means. */
function cleanEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base = { ...process.env };
  delete base.ENGRAM_URL;
  delete base.ENGRAM_API_KEY;
  return { ...base, ...env };
}

/** Runs `engram <args>` to completion (bounded by `timeoutMs`). */
export function runEngram(
  args: string[],
  opts: { env?: Record<string, string>; input?: string; timeoutMs?: number } = {},
): Promise<EngramRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [ENGRAM_BIN, ...args], {
      cwd: REPO_ROOT,
      env: cleanEnv(opts.env ?? {}),
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `engram ${args.join(" ")} did not finish in ${opts.timeoutMs ?? 30_000} ms\nstdout: ${stdout}\nstderr: ${stderr}`,
        ),
      );
    }, opts.timeoutMs ?? 30_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(opts.input ?? "");
  });
}

/** A long-running `engram` process (tail, serve) whose output lines are collected as they come. */
export interface EngramProcess {
  child: ChildProcess;
  stdoutLines: string[];
  stderrLines: string[];
  /** Waits (bounded) until some stdout line satisfies `match`. */
  waitForLine(match: (line: string) => boolean, timeoutMs?: number, from?: "stdout" | "stderr"): Promise<string>;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `engram <args>` in the background. */
export function spawnEngram(args: string[], env: Record<string, string> = {}): EngramProcess {
  const child = spawn(process.execPath, [ENGRAM_BIN, ...args], {
    cwd: REPO_ROOT,
    env: cleanEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stdoutLines: string[] = [];
  const stderrLines: string[] = [];
  const waiters = new Set<() => void>();
  const notify = () => waiters.forEach((w) => w());
  createInterface({ input: child.stdout! }).on("line", (l) => (stdoutLines.push(l), notify()));
  createInterface({ input: child.stderr! }).on("line", (l) => (stderrLines.push(l), notify()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    stdoutLines,
    stderrLines,
    waitForLine: (match, timeoutMs = 15_000, from = "stdout") =>
      new Promise((resolve, reject) => {
        const lines = from === "stdout" ? stdoutLines : stderrLines;
        const check = () => {
          const found = lines.find(match);
          if (found === undefined) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(found);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `no matching ${from} line in ${timeoutMs} ms; stdout:\n${stdoutLines.join("\n")}\nstderr:\n${stderrLines.join("\n")}`,
            ),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      }),
    stop: (signal = "SIGTERM") => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}
