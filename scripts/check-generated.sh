#!/usr/bin/env bash
# Fails when the committed generated code differs from what `buf generate` produces now:
# every generated file must exist and match byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/generate.sh "$tmp" >/dev/null
stale=0
while IFS= read -r file; do
  rel=${file#"$tmp"/}
  if ! cmp -s "$file" "$rel"; then
    echo "stale generated file: $rel" >&2
    stale=1
  fi
done < <(find "$tmp" -type f | sort)
if [ "$stale" -ne 0 ]; then
  echo "generated code is out of date: run scripts/generate.sh and commit the result" >&2
  exit 1
fi
echo "generated code is up to date ($(find "$tmp" -type f | wc -l) files)"
