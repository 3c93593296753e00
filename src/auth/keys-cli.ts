/**
 * `engram keys`: create, list and revoke API keys in the configured backend
 * (the same MEMORY_* settings the server reads: Redis, PostgreSQL, or the key
 * file of the local store). The key itself is printed once, at creation;
 * only its hash is stored.
 *
 *   npm run keys -- create --app support-bot --role write [--user alice] [--name ci] [--rate-limit 50]
 *   npm run keys -- list [--json]
 *   npm run keys -- revoke <id>
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { ConfigError, loadConfig } from "../config.js";
import { API_KEY_ROLES, generateApiKey, validateScope, type ApiKeyRole } from "./api-keys.js";
import { openApiKeyStore } from "./index.js";

const USAGE = `usage: engram keys <command> [options]

commands:
  create --app APP [--app APP2 ...] --role read|write|admin [--user USER] [--name NOTE] [--rate-limit N]
         (--app '*' for every app; prints the new key once)
  list                 every key (id, role, apps, user, created, revoked)
  revoke ID            revokes a key (takes effect within MEMORY_AUTH_CACHE_MS)

options:
  --json               machine-readable output
  --memory-type, --redis-url, --postgres-url, --key-prefix, --auth-keys-file
                       where the keys live (default: the MEMORY_* environment, as the server)
`;

const BACKEND_FLAGS = ["memory-type", "redis-url", "postgres-url", "key-prefix", "auth-keys-file"] as const;

/** Runs the keys command; returns the exit status. */
export async function runKeysCommand(
  argv: string[],
  out: (line: string) => void = console.log,
  err: (line: string) => void = console.error,
): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        app: { type: "string", multiple: true },
        role: { type: "string" },
        user: { type: "string" },
        name: { type: "string" },
        "rate-limit": { type: "string" },
        json: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
        ...Object.fromEntries(BACKEND_FLAGS.map((f) => [f, { type: "string" as const }])),
      },
    });
  } catch (e) {
    err(`engram keys: ${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    (values.help ? out : err)(USAGE);
    return values.help ? 0 : 2;
  }
  let config;
  try {
    const backend = values as Record<string, unknown>;
    const forwarded = BACKEND_FLAGS.flatMap((f) =>
      typeof backend[f] === "string" ? [`--${f}`, backend[f] as string] : [],
    );
    config = loadConfig(forwarded, process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      err(`engram keys: ${e.message}`);
      return 2;
    }
    throw e;
  }
  const keys = await openApiKeyStore(config);
  try {
    switch (command) {
      case "create": {
        const role = values.role as ApiKeyRole | undefined;
        const scope = {
          role: role ?? ("" as ApiKeyRole),
          apps: values.app ?? [],
          userId: values.user,
          rateLimit: values["rate-limit"] === undefined ? undefined : Number(values["rate-limit"]),
        };
        try {
          if (!role) throw new Error(`role: required, one of ${API_KEY_ROLES.join(", ")}`);
          validateScope(scope);
        } catch (e) {
          err(`engram keys create: ${(e as Error).message}`);
          return 2;
        }
        const { key, record } = generateApiKey({ ...scope, name: values.name });
        await keys.create(record);
        if (values.json)
          out(
            JSON.stringify({
              key,
              id: record.id,
              role: record.role,
              apps: record.apps,
              user_id: record.userId ?? null,
            }),
          );
        else {
          out(
            `created API key ${record.id} (role ${record.role}, apps ${record.apps.join(",")}${record.userId ? `, user ${record.userId}` : ""})`,
          );
          out(`key (shown once; send it as "authorization: Bearer <key>"):`);
          out(key);
        }
        return 0;
      }
      case "list": {
        const all = await keys.list();
        if (values.json) {
          for (const k of all) {
            const { hash: _hash, ...shown } = k;
            out(JSON.stringify(shown));
          }
          return 0;
        }
        out(["ID", "ROLE", "APPS", "USER", "NAME", "CREATED", "REVOKED"].join("\t"));
        for (const k of all) {
          out(
            [
              k.id,
              k.role,
              k.apps.join(","),
              k.userId ?? "-",
              k.name ?? "-",
              new Date(k.createdAt).toISOString(),
              k.revokedAt ? new Date(k.revokedAt).toISOString() : "-",
            ].join("\t"),
          );
        }
        return 0;
      }
      case "revoke": {
        if (rest.length !== 1) {
          err("engram keys revoke: give exactly one key id (see `engram keys list`)");
          return 2;
        }
        const done = await keys.revoke(rest[0]);
        if (!done) {
          err(`engram keys revoke: no API key with id ${JSON.stringify(rest[0])}`);
          return 1;
        }
        out(values.json ? JSON.stringify({ id: rest[0], revoked: true }) : `revoked API key ${rest[0]}`);
        return 0;
      }
      default:
        err(`engram keys: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
        return 2;
    }
  } finally {
    await keys.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  runKeysCommand(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(`engram keys: ${(e as Error).message}`);
      process.exit(1);
    },
  );
}
