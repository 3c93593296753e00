# The Engram server image (used by docker-compose.yml), Node 20.
# Stage 1 installs everything and builds what the server serves or imports:
# the inspector page (inspector/dist) and the TypeScript client (its dist/,
# used by the `engram` CLI). Stage 2 keeps production dependencies (tsx runs
# the TypeScript sources directly) and those two builds.
FROM node:20-slim AS build
WORKDIR /app
COPY . .
RUN npm ci

FROM node:20-slim
WORKDIR /app
COPY package.json package-lock.json ./
COPY clients/typescript/package.json clients/typescript/package.json
RUN npm ci --omit=dev --ignore-scripts
COPY --from=build /app/clients/typescript/dist clients/typescript/dist
COPY --from=build /app/inspector/dist inspector/dist
COPY proto proto
COPY src src
COPY tsconfig.json ./
ENV HOST=0.0.0.0 PORT=8000
EXPOSE 8000
USER node
CMD ["node_modules/.bin/tsx", "src/main.ts"]
