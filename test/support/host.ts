/**
 * What the test setup needs from the machine: free loopback ports, and
 * Debian packages installed on demand (once, under a lock shared by every
 * test process) when a binary is missing and we run as root.
 */
import { execFileSync } from "node:child_process";
import { accessSync, constants, existsSync, unlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/** A loopback port nobody listens on right now (the kernel picks it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function firstExecutable(candidates: readonly string[]): string | undefined {
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Where to look for a program: each PATH entry and the usual system dirs. */
export function onPath(program: string): string[] {
  const dirs = [...(process.env.PATH ?? "").split(path.delimiter), "/usr/bin", "/usr/sbin", "/usr/local/bin"];
  return dirs.filter(Boolean).map((dir) => path.join(dir, program));
}

/**
 * The first executable of `candidates`; when there is none and we run as
 * root, installs the Debian package `packageName` (apt-get update + install)
 * once across processes, then looks again. `hint` ends the error otherwise.
 */
export async function debianBinary(opts: {
  packageName: string;
  candidates: readonly string[];
  timeoutMs: number;
  hint?: string;
}): Promise<string> {
  const found = firstExecutable(opts.candidates);
  if (found) return found;
  const what = path.basename(opts.candidates[0] ?? opts.packageName);
  if (process.getuid?.() !== 0) {
    throw new Error(
      `${what} not found: install the Debian package \`${opts.packageName}\` (apt-get install ${opts.packageName})${opts.hint ? ` ${opts.hint}` : ""}`,
    );
  }
  const lock = path.join(tmpdir(), `engram-${opts.packageName}-install.lock`);
  let owner = false;
  try {
    writeFileSync(lock, String(process.pid), { flag: "wx" });
    owner = true;
  } catch {
    // Another process is installing: wait for it.
  }
  if (owner) {
    try {
      execFileSync(
        "sh",
        ["-c", `apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${opts.packageName}`],
        { stdio: "ignore", timeout: opts.timeoutMs },
      );
    } finally {
      unlinkSync(lock);
    }
  } else {
    const deadline = Date.now() + opts.timeoutMs;
    while (existsSync(lock) && Date.now() < deadline) await sleep(500);
  }
  const installed = firstExecutable(opts.candidates);
  if (!installed)
    throw new Error(`${what} still not found after installing the Debian package \`${opts.packageName}\``);
  return installed;
}
