#!/usr/bin/env bash
# Regenerates the Go client's code from proto/ with buf and local plugins
# (protoc-gen-go and protoc-gen-connect-go, pinned in clients/go/go.mod).
# Usage: clients/go/scripts/generate.sh [OUT_ROOT]
#   The code lands in OUT_ROOT/clients/go/gen (OUT_ROOT defaults to the
#   repository root; a relative OUT_ROOT is taken from the repository root).
set -euo pipefail
cd "$(dirname "$0")/../../.."
npx buf generate --template clients/go/buf.gen.yaml -o "${1:-.}"
