#!/usr/bin/env bash
# The "import cycles" step of `npm test`: fails when the TypeScript import graph
# of the server, the benchmark, the tests, the TypeScript client or the inspector has a
# cycle (madge, a pinned devDependency; `import type` and dynamic imports count
# too), or when madge could not resolve a relative import, since a cycle
# through a file it skipped would go unseen.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
out=$(npx madge --circular --warning --no-spinner --no-color --extensions ts --ts-config tsconfig.json \
  src bench test clients/typescript/src inspector/src 2>&1) || status=$?
echo "$out"
# Skipped packages (names without a leading . or /) are outside the graph by design.
if unresolved=$(sed -n '/Skipped/,$p' <<<"$out" | grep -E '^\.{1,2}/|^/'); then
  echo "madge could not resolve these relative imports:" >&2
  echo "$unresolved" >&2
  status=1
fi
exit "$status"
