#!/usr/bin/env bash
# Regenerates the TypeScript client's code from proto/ with buf and the local
# protoc-gen-es plugin (pinned in the root package.json).
# Usage: clients/typescript/scripts/generate.sh [OUT_ROOT]
#   The code lands in OUT_ROOT/clients/typescript/src/gen (OUT_ROOT defaults to
#   the repository root; a relative OUT_ROOT is taken from the repository root).
set -euo pipefail
cd "$(dirname "$0")/../../.."
npx buf generate --template clients/typescript/buf.gen.yaml -o "${1:-.}"
