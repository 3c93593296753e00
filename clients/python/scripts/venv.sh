#!/usr/bin/env bash
# Makes (or refreshes) clients/python/.venv with the pinned dependencies
# (constraints.txt, requirements-gen.txt) and the package installed editable
# with its extras. Reinstalls only when the pins or the package metadata
# changed. Used by this client's test.sh and by the polyglot end-to-end test.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
want=$(cat pyproject.toml constraints.txt requirements-gen.txt | sha256sum | cut -d' ' -f1)
stamp=.venv/.engram-deps
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || ! .venv/bin/python -c 'import engram_memory' 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -c constraints.txt -r requirements-gen.txt -e '.[pydantic-ai,adk,openai-agents,langchain,langgraph,test,framework-tests,check]'
  echo "$want" >"$stamp"
fi
