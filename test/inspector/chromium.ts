/**
 * Finds Debian's chromium for the browser tests, installing the Debian
 * package once (under a lock shared by every test process) when it is
 * missing and we run as root — the same pattern as test/support/redis-server.ts.
 */
import { execFileSync } from "node:child_process";
import { accessSync, constants, existsSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const INSTALL_LOCK = path.join(tmpdir(), "engram-chromium-install.lock");
const CANDIDATES = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];

function findChromium(): string | undefined {
  for (const candidate of CANDIDATES) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Path of the chromium binary; installs the Debian package `chromium` when missing and running as root. */
export async function chromiumBinary(): Promise<string> {
  const found = findChromium();
  if (found) return found;
  if (process.getuid?.() !== 0) {
    throw new Error("chromium not found at /usr/bin/chromium: install the Debian package `chromium` (apt-get install chromium)");
  }
  let owner = false;
  try {
    writeFileSync(INSTALL_LOCK, String(process.pid), { flag: "wx" });
    owner = true;
  } catch {
    // Another process is installing: wait for it.
  }
  if (owner) {
    try {
      execFileSync("sh", ["-c", "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium"], { stdio: "ignore", timeout: 600_000 });
    } finally {
      unlinkSync(INSTALL_LOCK);
    }
  } else {
    const deadline = Date.now() + 600_000;
    while (existsSync(INSTALL_LOCK) && Date.now() < deadline) await sleep(500);
  }
  const installed = findChromium();
  if (!installed) throw new Error("chromium still not found after installing the Debian package `chromium`");
  return installed;
}
