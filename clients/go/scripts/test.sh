#!/usr/bin/env bash
# Tests of the Go client: static checks, then the suites against real servers
# (started by the tests from the repository's node_modules/.bin/tsx).
# Run from anywhere; the repository's scripts/test.sh runs it from the root.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt needed: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -count=1 -timeout 5m ./...
