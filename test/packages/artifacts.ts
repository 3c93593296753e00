/**
 * Builds Engram's packages the way each ecosystem builds them, into a folder
 * outside the checkout, and makes fresh projects that install them: the
 * Python sdist and wheel (python -m build), the npm tarballs of the server
 * and of the TypeScript client (npm pack), and the Go module (a module zip
 * served by a file:// module proxy, as `go get` fetches from a real one).
 * Downloads are cached under .tmp/packages so a second run stays offline.
 */
import { execFile, execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "../support/engram.js";

const run = promisify(execFile);

/** Downloads and build tools kept between runs (npm cache, pip cache, the Python build venv). */
export const CACHE = path.join(REPO_ROOT, ".tmp", "packages");
/** The Go client's module path, as clients/go/go.mod declares it. */
export const GO_MODULE = readFileSync(path.join(REPO_ROOT, "clients/go/go.mod"), "utf8").match(/^module (\S+)$/m)![1];
/** The version the Go module is served as from the file proxy. */
export const GO_VERSION = "v0.1.0";

/** Runs a command (10 minutes at most); resolves with its stdout, rejects with its stderr in the message. */
export async function sh(
  command: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<string> {
  try {
    const { stdout } = await run(command, args, {
      cwd: opts.cwd ?? REPO_ROOT,
      env: opts.env ?? process.env,
      timeout: 600_000,
      maxBuffer: 64 << 20,
    });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${command} ${args.join(" ")} failed: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`, {
      cause: err,
    });
  }
}

/** Copies the files git tracks into `dest`: what a fresh clone holds. */
export function copyTrackedFiles(dest: string): void {
  const files = execFileSync("git", ["ls-files", "-z"], { cwd: REPO_ROOT, encoding: "utf8" })
    .split("\0")
    .filter(Boolean);
  for (const file of files) {
    const from = path.join(REPO_ROOT, file);
    if (!existsSync(from)) continue; // deleted in the working tree, not yet committed
    mkdirSync(path.dirname(path.join(dest, file)), { recursive: true });
    copyFileSync(from, path.join(dest, file));
  }
}

/** The first fenced block of `lang` in a README: the quickstart a newcomer copies. */
export function readmeBlock(readme: string, lang: string): string {
  const match = readFileSync(path.join(REPO_ROOT, readme), "utf8").match(
    new RegExp("```" + lang + "\\n([\\s\\S]*?)```"),
  );
  if (!match) throw new Error(`${readme} has no \`\`\`${lang} block`);
  return match[1];
}

const npmFlags = [
  "--cache",
  path.join(CACHE, "npm-cache"),
  "--prefer-offline",
  "--no-audit",
  "--no-fund",
  "--loglevel=error",
];

/**
 * `npm pack` of the TypeScript client (its prepack builds dist/), of the CLI
 * package (the `engram` bin) and of the server (dist/ built first, as `npm ci`
 * does); returns the tarballs.
 */
export async function packNpm(out: string): Promise<{ client: string; cli: string; server: string }> {
  await sh(process.execPath, ["scripts/build.mjs", "--if-stale"]);
  if (!existsSync(path.join(REPO_ROOT, "inspector/dist/index.html")))
    await sh(process.execPath, ["inspector/scripts/build.mjs"]);
  const pack = async (dir: string, extra: string[]) =>
    path.join(
      out,
      JSON.parse(await sh("npm", ["pack", "--json", "--pack-destination", out, ...extra, ...npmFlags], { cwd: dir }))[0]
        .filename,
    );
  return {
    client: await pack(path.join(REPO_ROOT, "clients/typescript"), []),
    cli: await pack(path.join(REPO_ROOT, "packages/cli"), []),
    // The server's own prepare builds the inspector and dist/, done just above.
    server: await pack(REPO_ROOT, ["--ignore-scripts"]),
  };
}

/** A fresh npm project in `dir` with the tarballs installed, as `npm install <tarball>...` does. */
export async function npmProject(dir: string, tarballs: string[]): Promise<void> {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({ name: "fresh-project", version: "1.0.0", private: true, type: "module" }),
  );
  await sh("npm", ["install", ...npmFlags, ...tarballs], { cwd: dir });
}

/** The sdist and the wheel, from `python -m build` (the wheel is built from the sdist) in a cached build venv. */
export async function buildPython(out: string): Promise<{ sdist: string; wheel: string }> {
  const venv = path.join(CACHE, "build-venv");
  const python = path.join(venv, "bin", "python");
  if (!existsSync(path.join(venv, ".ready"))) {
    await sh("python3", ["-m", "venv", "--clear", venv]);
    await sh(python, [
      "-m",
      "pip",
      "install",
      "--quiet",
      "--disable-pip-version-check",
      "--cache-dir",
      path.join(CACHE, "pip-cache"),
      "build>=1.2",
      "hatchling>=1.25",
    ]);
    writeFileSync(path.join(venv, ".ready"), "");
  }
  // --no-isolation: hatchling comes from the cached venv instead of a download per run.
  await sh(python, ["-m", "build", "--no-isolation", "--outdir", out, path.join(REPO_ROOT, "clients/python")]);
  const files = readdirSync(out);
  return {
    sdist: path.join(out, files.find((f) => f.endsWith(".tar.gz"))!),
    wheel: path.join(out, files.find((f) => f.endsWith(".whl"))!),
  };
}

/** A fresh venv of `python` in `dir` with `artifact` (a wheel or an sdist) installed by pip; returns its python. */
export async function pythonProject(dir: string, python: string, artifact: string): Promise<string> {
  await sh(python, ["-m", "venv", dir]);
  const venvPython = path.join(dir, "bin", "python");
  await sh(venvPython, [
    "-m",
    "pip",
    "install",
    "--quiet",
    "--disable-pip-version-check",
    "--cache-dir",
    path.join(CACHE, "pip-cache"),
    artifact,
  ]);
  return venvPython;
}

/**
 * The Python interpreters of 3.10 or newer the machine has, oldest first: each
 * python3.N on PATH or in pyenv's versions folder that actually starts (a
 * pyenv shim of a version not selected does not).
 */
export async function pythonInterpreters(): Promise<string[]> {
  const pyenvVersions = path.join(process.env.PYENV_ROOT ?? path.join(homedir(), ".pyenv"), "versions");
  const dirs = [
    ...(process.env.PATH ?? "").split(":"),
    ...(existsSync(pyenvVersions) ? readdirSync(pyenvVersions).map((v) => path.join(pyenvVersions, v, "bin")) : []),
  ];
  const found: string[] = [];
  for (let minor = 10; minor <= 14; minor++) {
    for (const candidate of dirs.map((dir) => path.join(dir, `python3.${minor}`)).filter((file) => existsSync(file))) {
      const works = await sh(candidate, ["-c", "import venv, ensurepip"]).then(
        () => true,
        () => false,
      );
      if (works) {
        found.push(candidate);
        break;
      }
    }
  }
  return found;
}

/**
 * A file:// Go module proxy in `dir` serving the Go client as GO_MODULE@GO_VERSION:
 * list, .info, .mod and the module zip, made from the files git would commit
 * (tracked, plus untracked ones not ignored), so an uncommitted file is missed
 * here as it would be by a real proxy.
 */
export async function goProxy(dir: string): Promise<void> {
  const at = path.join(dir, GO_MODULE, "@v");
  mkdirSync(at, { recursive: true });
  writeFileSync(path.join(at, "list"), `${GO_VERSION}\n`);
  writeFileSync(
    path.join(at, `${GO_VERSION}.info`),
    JSON.stringify({ Version: GO_VERSION, Time: new Date().toISOString() }),
  );
  copyFileSync(path.join(REPO_ROOT, "clients/go/go.mod"), path.join(at, `${GO_VERSION}.mod`));
  const files = (await sh("git", ["ls-files", "-co", "--exclude-standard", "--", "clients/go"]))
    .split("\n")
    .filter((f) => f && existsSync(path.join(REPO_ROOT, f)));
  // A module zip is the module's files under "<module>@<version>/" (golang.org/x/mod/zip's layout).
  const zipper =
    "import sys, zipfile\nroot, prefix, out = sys.argv[1:4]\nwith zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:\n  for f in sys.stdin.read().split():\n    z.write(root + '/clients/go/' + f, prefix + f)\n";
  const relative = files.map((f) => path.relative("clients/go", f)).join("\n");
  await new Promise<void>((resolve, reject) => {
    const child = execFile(
      "python3",
      ["-c", zipper, REPO_ROOT, `${GO_MODULE}@${GO_VERSION}/`, path.join(at, `${GO_VERSION}.zip`)],
      (err) => (err ? reject(err) : resolve()),
    );
    child.stdin!.end(relative);
  });
}

/**
 * The environment of a fresh Go module that resolves ours through the file
 * proxy and everything else through the local module cache's download folder
 * (itself a proxy layout), then the real proxy. Its own module cache keeps a
 * previous run's copy of GO_VERSION from being reused.
 */
export async function goEnv(proxy: string, modCache: string): Promise<NodeJS.ProcessEnv> {
  const sharedCache = (await sh("go", ["env", "GOMODCACHE"])).trim();
  return {
    ...process.env,
    GOPROXY: `file://${proxy},file://${sharedCache}/cache/download,https://proxy.golang.org`,
    GOMODCACHE: modCache,
    // The checksum database cannot know a module served only from a local proxy.
    GONOSUMDB: GO_MODULE,
    GOSUMDB: process.env.GOSUMDB ?? "sum.golang.org",
    GOFLAGS: "-mod=mod",
    GOTOOLCHAIN: "local",
  };
}
