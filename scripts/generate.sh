#!/usr/bin/env bash
# Regenerates all code from proto/ with buf and local plugins only.
# Usage: scripts/generate.sh [OUTPUT_ROOT]   (default: the repository itself)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.}"
npx buf generate --template buf.gen.yaml -o "$out"
# Each client adds its own template (and any plugin set-up) here.
for client in clients/*/; do
  if [ -x "${client}scripts/generate.sh" ]; then
    "${client}scripts/generate.sh" "$out"
  fi
done
# Into the repository itself: rebuild the TypeScript client's dist/ too, since
# the server imports the generated contract from it (@engram-memory/client/gen/...).
if [ "$out" = "." ]; then
  node clients/typescript/scripts/prepare.mjs
fi
