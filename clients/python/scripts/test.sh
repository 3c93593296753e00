#!/usr/bin/env bash
# Tests of the Python client (run by the repository's `npm test` from the
# repository root): makes clients/python/.venv with the pinned dependencies
# (constraints.txt, requirements-gen.txt), then runs pytest against real
# servers started from the repository (node_modules/.bin/tsx src/main.ts).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
# Reinstall only when the pins or the package's metadata changed.
want=$(cat pyproject.toml constraints.txt requirements-gen.txt | sha256sum | cut -d' ' -f1)
stamp=.venv/.engram-deps
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || ! .venv/bin/python -c 'import engram_memory' 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -c constraints.txt -r requirements-gen.txt -e '.[pydantic-ai,test]'
  echo "$want" >"$stamp"
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
