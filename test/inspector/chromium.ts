/**
 * Finds Debian's chromium for the browser tests, installing the Debian
 * package once (under a lock shared by every test process) when it is
 * missing and we run as root (test/support/host.ts).
 */
import { debianBinary } from "../support/host.js";

/** Path of the chromium binary; installs the Debian package `chromium` when missing and running as root. */
export function chromiumBinary(): Promise<string> {
  return debianBinary({
    packageName: "chromium",
    candidates: ["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    timeoutMs: 600_000,
  });
}
