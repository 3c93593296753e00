#!/usr/bin/env bash
# Prints the path of a Go command built once by `go install` (the Go module
# proxy, a pinned version) into .tmp/gobin and reused: grpcurl for the documentation
# examples test, connectconformance for the Connect conformance suite.
# Several test files at once wait for one another on a lock the kernel drops
# should the installer die.
# Usage: test/support/go-install.sh NAME PACKAGE VERSION
set -euo pipefail
name=$1
package=$2
version=$3
cd "$(dirname "$0")/../.."
mkdir -p .tmp/gobin
exec 9>.tmp/gobin.lock
flock 9
if [ "$(cat ".tmp/gobin/.$name-version" 2>/dev/null || true)" != "$version" ] || [ ! -x ".tmp/gobin/$name" ]; then
  GOBIN="$PWD/.tmp/gobin" go install "$package@$version" >&2
  echo "$version" >".tmp/gobin/.$name-version"
fi
echo "$PWD/.tmp/gobin/$name"
