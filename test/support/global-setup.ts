/**
 * Global setup: real backing servers (Redis, PostgreSQL) are started here once
 * per test run by the store drivers' setup, and their URLs handed to test
 * files through environment variables. Only the local store needs nothing.
 */
export default async function setup(): Promise<() => Promise<void>> {
  const teardowns: Array<() => Promise<void>> = [];
  return async () => {
    for (const teardown of teardowns.reverse()) await teardown();
  };
}
