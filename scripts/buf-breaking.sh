#!/usr/bin/env bash
# Checks the proto contract for breaking changes against the previous commit.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --verify --quiet HEAD~1 >/dev/null; then
  echo "buf breaking: no previous commit to compare with (shallow or first commit); skipped"
  exit 0
fi
if ! git cat-file -e HEAD~1:proto 2>/dev/null; then
  echo "buf breaking: the previous commit has no proto/; skipped"
  exit 0
fi
npx buf breaking --against ".git#ref=HEAD~1"
echo "buf breaking: no breaking change against HEAD~1"
