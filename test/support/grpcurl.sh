#!/usr/bin/env bash
# Prints the path of a grpcurl binary for the README examples test: the one
# on PATH, or one built once by `go install` (the Go module proxy, a pinned
# version) into .tmp/gobin and reused. Several test files at once wait for
# one another on a lock the kernel drops should the installer die.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=v1.9.1
if command -v grpcurl >/dev/null 2>&1; then
  command -v grpcurl
  exit 0
fi
mkdir -p .tmp/gobin
exec 9>.tmp/gobin.lock
flock 9
if [ "$(cat .tmp/gobin/.grpcurl-version 2>/dev/null || true)" != "$version" ]; then
  GOBIN="$PWD/.tmp/gobin" go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$version" >&2
  echo "$version" >.tmp/gobin/.grpcurl-version
fi
echo "$PWD/.tmp/gobin/grpcurl"
