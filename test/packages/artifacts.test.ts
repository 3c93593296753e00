/**
 * The packages as a newcomer gets them, not the checkout: each is built the
 * way its ecosystem builds it (python -m build, npm pack, a Go module zip),
 * installed into a fresh project in a temp folder outside the repository (a
 * new venv per Python interpreter and artifact, a new npm project, a new Go
 * module resolving ours through a file:// module proxy), and each README's
 * quickstart runs there, as written but for the server's port, against a
 * server started from the installed npm package's `engram` bin. A file left
 * out of a package, a wrong entry point or an undeclared dependency fails here.
 */
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT, spawnServer, type ServerProcess } from "../support/engram.js";
import {
  GO_MODULE,
  GO_VERSION,
  buildPython,
  goEnv,
  goProxy,
  npmProject,
  packNpm,
  pythonInterpreters,
  pythonProject,
  readmeBlock,
  sh,
} from "./artifacts.js";

const README_ADDRESS = "127.0.0.1:8000";

describe("the packages, installed outside the checkout", () => {
  let work: string;
  let npmApp: string;
  let server: ServerProcess;
  let python: { sdist: string; wheel: string };
  let interpreters: string[];

  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), "engram-packages-"));
    expect(path.relative(REPO_ROOT, work).startsWith("..")).toBe(true);
    const out = path.join(work, "artifacts");
    mkdirSync(out);
    const [tarballs, built] = await Promise.all([packNpm(out), buildPython(path.join(out, "python"))]);
    python = built;
    interpreters = await pythonInterpreters();
    npmApp = path.join(work, "npm-app");
    await npmProject(npmApp, [tarballs.client, tarballs.cli, tarballs.server]);
    server = await spawnServer({}, [], {
      entry: [path.join(npmApp, "node_modules/.bin/engram"), "serve"],
      cwd: npmApp,
    });
  }, 900_000);

  // Removing node_modules, the venvs and a Go module cache takes more than the default hook time on a busy machine.
  afterAll(async () => {
    await server?.kill();
    if (work) {
      // Go makes its module cache read-only; give write back so the folder can go.
      const writable = (dir: string) => {
        for (const entry of readdirSync(dir)) {
          const full = path.join(dir, entry);
          if (lstatSync(full).isDirectory()) {
            chmodSync(full, 0o755);
            writable(full);
          }
        }
      };
      if (existsSync(path.join(work, "gomodcache"))) writable(path.join(work, "gomodcache"));
      rmSync(work, { recursive: true, force: true });
    }
  }, 300_000);

  it("the server runs from the npm tarball: `engram serve` listens and serves its inspector page", async () => {
    expect(server.child.spawnargs.join(" ")).toContain("node_modules/.bin/engram serve");
    expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    expect(await (await fetch(`${server.baseUrl}/`)).text()).toContain("<html");
  });

  it("the `engram` CLI from the npm tarball reports the package version and reads the server", async () => {
    const bin = path.join(npmApp, "node_modules/.bin/engram");
    const { version } = (await import(path.join(REPO_ROOT, "package.json"), { with: { type: "json" } })).default as {
      version: string;
    };
    expect((await sh(bin, ["--version"], { cwd: npmApp })).trim()).toBe(version);
    expect(await sh(bin, ["stats", "--url", server.baseUrl], { cwd: npmApp })).toMatch(/sessions/i);
  });

  it("`npx engram --help` in the project runs node_modules/.bin/engram, the CLI package's, with nothing in the npx cache", async () => {
    expect(realpathSync(path.join(npmApp, "node_modules/.bin/engram"))).toBe(
      realpathSync(path.join(npmApp, "node_modules/@engram-memory/cli/bin.mjs")),
    );
    // An empty npm cache and --offline: npx can only run what the project has installed.
    const npmCache = path.join(work, "empty-npm-cache");
    const env = {
      ...process.env,
      npm_config_cache: npmCache,
      npm_config_offline: "true",
      npm_config_update_notifier: "false",
    };
    for (const call of ["first", "warm"]) {
      expect(await sh("npx", ["engram", "--help"], { cwd: npmApp, env }), call).toContain("Usage: engram");
      expect(existsSync(path.join(npmCache, "_npx")), call).toBe(false);
    }
  }, 120_000);

  it("the TypeScript client README's quickstart runs in a fresh npm project with the tarball installed", async () => {
    const script = path.join(npmApp, "quickstart.mjs");
    writeFileSync(script, readmeBlock("clients/typescript/README.md", "js").replace(README_ADDRESS, server.address));
    const stdout = await sh(process.execPath, [script], { cwd: npmApp });
    expect(stdout).toContain("1 user_message What is the weather in Paris?");
    expect(stdout).toContain("User: What is the weather in Paris?");
  });

  it("finds at least one Python interpreter of 3.10 or newer to test with", () => {
    expect(interpreters.length).toBeGreaterThan(0);
    console.log(`Python interpreters: ${interpreters.join(", ")}`);
  });

  // The wheel on the oldest and the newest interpreter; the sdist (built into a wheel by pip) on the newest.
  for (const kind of ["wheel", "sdist"] as const) {
    it(`the Python client README's example runs in fresh venvs with the ${kind} installed`, async () => {
      const chosen =
        kind === "wheel"
          ? [...new Set([interpreters[0], interpreters[interpreters.length - 1]])]
          : [interpreters[interpreters.length - 1]];
      for (const interpreter of chosen) {
        const venvPython = await pythonProject(
          path.join(work, `venv-${kind}-${path.basename(interpreter)}`),
          interpreter,
          python[kind],
        );
        const script = path.join(work, `quickstart-${kind}-${path.basename(interpreter)}.py`);
        writeFileSync(
          script,
          readmeBlock("clients/python/README.md", "python").replace(README_ADDRESS, server.address),
        );
        // From the temp folder, so `engram_memory` can only come from the venv.
        const stdout = await sh(venvPython, [script], { cwd: work });
        expect(stdout).toContain("1 user_message What is the capital of France?");
        expect(stdout).toContain("User: What is the capital of France?");
      }
    }, 900_000);
  }

  it(`the Go client README's example runs in a fresh module that gets ${GO_MODULE}@${GO_VERSION} from a module proxy`, async () => {
    const proxy = path.join(work, "goproxy");
    await goProxy(proxy);
    const app = path.join(work, "go-app");
    mkdirSync(app);
    const env = await goEnv(proxy, path.join(work, "gomodcache"));
    await sh("go", ["mod", "init", "example.com/quickstart"], { cwd: app, env });
    await sh("go", ["get", `${GO_MODULE}/memory@${GO_VERSION}`], { cwd: app, env });
    writeFileSync(
      path.join(app, "main.go"),
      readmeBlock("clients/go/README.md", "go").replace(README_ADDRESS, server.address),
    );
    const stdout = await sh("go", ["run", "."], { cwd: app, env });
    expect(stdout).toContain("1 user_message What is the capital of France?");
    expect(stdout).toContain("2 agent_response Paris.");
  }, 600_000);
});
