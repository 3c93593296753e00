#!/usr/bin/env bash
# The test command (`npm test`): static checks, then every suite against real
# servers. Backing servers (Redis, PostgreSQL) are started by the test setup;
# client toolchains (Python venv, Go modules) by each client's own script.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tmp
failed=()
step() {
  local name=$1
  shift
  echo
  echo "=== $name"
  if "$@"; then echo "=== $name: ok"; else echo "=== $name: FAILED"; failed+=("$name"); fi
}

# The server imports the generated contract from the TypeScript client's dist/.
step "TypeScript client build" node clients/typescript/scripts/prepare.mjs
step "typecheck" npx tsc -p tsconfig.json --noEmit
step "import cycles" scripts/check-import-cycles.sh
step "lint (eslint)" npm run --silent lint
step "format (biome)" npx biome format .
step "buf lint" npx buf lint
step "buf breaking" scripts/buf-breaking.sh
step "generated code" scripts/check-generated.sh
step "deployment manifests" scripts/validate-deploy.sh
step "server suites (vitest)" npx vitest run --reporter=default --reporter=json --outputFile.json=.tmp/vitest.json
for client in clients/*/; do
  if [ -x "${client}scripts/test.sh" ]; then
    step "client ${client}" "${client}scripts/test.sh"
  fi
done

passed=$(node -e 'try{const r=require("./.tmp/vitest.json");console.log(r.numPassedTests)}catch{console.log(0)}')
failing=$(node -e 'try{const r=require("./.tmp/vitest.json");console.log(r.numFailedTests)}catch{console.log(0)}')
echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED steps: ${failed[*]}"
fi
echo "server: $passed passed, $failing failed"
# CI shows only the tail of this output: name each failing test and its first
# error lines here, so a failure can be read without the full log.
node -e '
try {
  const r = require("./.tmp/vitest.json");
  for (const file of r.testResults) for (const t of file.assertionResults)
    if (t.status === "failed") {
      console.log("FAILED test: " + file.name.replace(process.cwd() + "/", "") + " > " + t.fullName);
      for (const m of t.failureMessages ?? []) console.log("  " + m.split("\n").slice(0, 6).join("\n  "));
    }
} catch {}'

[ ${#failed[@]} -eq 0 ]
