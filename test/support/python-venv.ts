/**
 * Test Python environments: .tmp/<name>-venv, made on first use from the
 * exact pins in test/support/<name>-requirements.txt by python-venv.sh and
 * cached (a fresh machine pays one install, later runs a check).
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "./engram.js";

/** The python of the `name` environment, made (or found up to date) by python-venv.sh. */
export async function venvPython(name: string): Promise<string> {
  const script = path.join(REPO_ROOT, "test", "support", "python-venv.sh");
  const { stdout } = await promisify(execFile)("bash", [script, name], {
    cwd: REPO_ROOT,
    timeout: 600_000,
    maxBuffer: 1 << 20,
  });
  return stdout.trim().split("\n").at(-1)!;
}
