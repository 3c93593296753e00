# The Engram server image (used by docker-compose.yml), Node 20.
# Stage 1 installs everything and builds (the root `prepare` script, run by
# npm ci) what the image runs: the compiled server and CLI (dist/), the
# inspector page (inspector/dist) and the TypeScript client (its dist/),
# whose generated contract code the server imports and which the CLI uses.
# Stage 2 keeps production dependencies and those builds; no TypeScript is
# compiled at run time.
FROM node:20-slim AS build
WORKDIR /app
COPY . .
RUN npm ci

FROM node:20-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
COPY clients/typescript/package.json clients/typescript/package.json
# The workspace whose bin is `engram` (node_modules/.bin/engram, for npx engram in the container).
COPY packages/cli/package.json packages/cli/bin.mjs packages/cli/
RUN npm ci --omit=dev --ignore-scripts
COPY --from=build /app/clients/typescript/dist clients/typescript/dist
COPY --from=build /app/inspector/dist inspector/dist
COPY --from=build /app/dist dist
# The `engram` CLI's code (it runs dist/cli when current, which it always is here).
COPY --from=build /app/src/cli/bin.mjs /app/src/cli/build-state.mjs src/cli/
ENV HOST=0.0.0.0 PORT=8000
EXPOSE 8000
USER node
# Ready means the store answers (GET /readyz: 200 SERVING, 503 NOT_SERVING while
# the backend is unreachable, at start-up too, or during shutdown).
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.PORT || 8000}/readyz`, { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
CMD ["node", "dist/main.js"]
