#!/usr/bin/env bash
# Prints the path of a grpcurl binary for the documentation examples test: the one
# on PATH, or one built once from a pinned version (go-install.sh).
set -euo pipefail
if command -v grpcurl >/dev/null 2>&1; then
  command -v grpcurl
  exit 0
fi
exec "$(dirname "$0")/go-install.sh" grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl v1.9.1
