/**
 * Builds the memory inspector into inspector/dist, which the server serves at /.
 * The generated protobuf-es code of the TypeScript client is imported directly
 * (its package entry also pulls in Node-only transports); connect-web's fetch
 * transport speaks the Connect protocol over HTTP/1.1, streams included.
 */
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/",
  logLevel: "warn",
  resolve: {
    // Exact matches: "@engram/gen" alone would also capture "@engram/gen/memories" as a prefix.
    alias: [
      { find: /^@engram\/gen$/, replacement: fileURLToPath(new URL("../clients/typescript/src/gen/engram/v1/memory_pb.ts", import.meta.url)) },
      { find: /^@engram\/gen\/memories$/, replacement: fileURLToPath(new URL("../clients/typescript/src/gen/engram/v1/memories_pb.ts", import.meta.url)) },
    ],
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    reportCompressedSize: false,
  },
});
