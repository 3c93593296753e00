import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "clients/typescript/test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Files run in separate processes; two at a time on a 2-core box.
    pool: "forks",
    maxWorkers: 2,
    globalSetup: ["test/support/global-setup.ts"],
  },
});
