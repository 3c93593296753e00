#!/usr/bin/env bash
# The TypeScript client's step of `npm test`: type-checks the package (its
# sources and tests). Its test suites run in the server's vitest run (the root
# vitest.config.ts includes clients/typescript/test) against real servers.
set -euo pipefail
cd "$(dirname "$0")/../../.."
npx tsc --noEmit -p clients/typescript
