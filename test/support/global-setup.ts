/**
 * Global setup: starts the real backing servers (Redis, PostgreSQL) once per
 * test run on free loopback ports in temp dirs, unless MEMORY_TEST_REDIS_URL /
 * MEMORY_TEST_POSTGRES_URL are given, and hands their URLs to the test files
 * through those environment variables. Stops them afterwards.
 */
export default async function setup(): Promise<() => Promise<void>> {
  const teardowns: Array<() => Promise<void>> = [];
  // BEGIN redis (owned by the Redis driver)
  // END redis
  // BEGIN postgres (owned by the PostgreSQL driver)
  // END postgres
  return async () => {
    for (const teardown of teardowns.reverse()) await teardown();
  };
}
