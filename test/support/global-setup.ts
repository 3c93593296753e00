/**
 * Global setup: starts the real backing servers (Redis, PostgreSQL) once per
 * test run on free loopback ports in temp dirs, unless MEMORY_TEST_REDIS_URL /
 * MEMORY_TEST_POSTGRES_URL / MEMORY_TEST_POSTGRES_VECTOR_URL are given, and hands their URLs to the test files
 * through those environment variables. Stops them afterwards.
 */
export default async function setup(): Promise<() => Promise<void>> {
  const teardowns: Array<() => Promise<void>> = [];
  // BEGIN redis (owned by the Redis driver)
  if (!process.env.MEMORY_TEST_REDIS_URL) {
    // Imported here so that runs given a URL never look for redis-server.
    const { startRedisServer } = await import("./redis-server.js");
    const redis = await startRedisServer({ appendonly: true });
    // Forked workers (and the servers they spawn) inherit this environment.
    process.env.MEMORY_TEST_REDIS_URL = redis.url;
    teardowns.push(() => redis.destroy());
  }
  // END redis
  // BEGIN redis-search (owned by the Redis driver: its long-term memory on the Redis Query Engine)
  if (!process.env.MEMORY_TEST_REDIS_SEARCH_URL) {
    const { startRedisSearchServer } = await import("./redis-search-server.js");
    const redisSearch = await startRedisSearchServer({ appendonly: true });
    process.env.MEMORY_TEST_REDIS_SEARCH_URL = redisSearch.url;
    teardowns.push(() => redisSearch.destroy());
  }
  // END redis-search
  // BEGIN postgres (owned by the PostgreSQL driver)
  if (!process.env.MEMORY_TEST_POSTGRES_URL) {
    const { startPostgresServer } = await import("./postgres-server.js");
    const postgres = await startPostgresServer();
    process.env.MEMORY_TEST_POSTGRES_URL = postgres.url;
    teardowns.push(() => postgres.stop());
  }
  // END postgres
  // BEGIN postgres-vector (owned by the PostgreSQL driver: a PostgreSQL with pgvector, for the memories' vector index)
  if (!process.env.MEMORY_TEST_POSTGRES_VECTOR_URL) {
    const { startPostgresServer, pgvectorBin } = await import("./postgres-server.js");
    const postgres = await startPostgresServer({ bin: await pgvectorBin() });
    process.env.MEMORY_TEST_POSTGRES_VECTOR_URL = postgres.url;
    teardowns.push(() => postgres.stop());
  }
  // END postgres-vector
  // BEGIN inspector (owned by the inspector)
  {
    // Built once per run, before any worker starts a server, so every test serves the current sources.
    const { execFileSync } = await import("node:child_process");
    execFileSync(process.execPath, ["inspector/scripts/build.mjs"], { stdio: "inherit" });
  }
  // END inspector
  // BEGIN ts-client (owned by the TypeScript client)
  {
    // The server imports the generated contract from the client's dist/ (@engram-memory/client/gen/...):
    // built once per run, before any worker starts a server, so every test runs the current contract.
    const { execFileSync } = await import("node:child_process");
    execFileSync(process.execPath, ["clients/typescript/scripts/prepare.mjs"], { stdio: "inherit" });
  }
  // END ts-client
  return async () => {
    for (const teardown of teardowns.reverse()) await teardown();
  };
}
