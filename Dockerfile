# The Engram server image (used by docker-compose.yml). Node 20, production
# dependencies plus tsx, which runs the TypeScript sources directly.
FROM node:20-slim
WORKDIR /app
COPY package.json package-lock.json ./
COPY clients/typescript/package.json clients/typescript/package.json
RUN npm ci --omit=dev --ignore-scripts --workspaces=false
COPY proto proto
COPY src src
COPY tsconfig.json ./
ENV HOST=0.0.0.0 PORT=8000
EXPOSE 8000
USER node
CMD ["node_modules/.bin/tsx", "src/main.ts"]
