#!/usr/bin/env bash
# Regenerates the Python client's gRPC/protobuf code from proto/ with buf and a
# local plugin (scripts/protoc-gen-engram-python: protoc's Python generator from
# grpcio-tools, plus mypy-protobuf for typed stubs), pinned in
# clients/python/requirements-gen.txt. Then writes the sync clients
# (src/engram_memory/_gen/sync) from the async ones with unasync
# (scripts/generate_sync.py), since buf's clean step removes them with the rest of _gen.
# Usage: clients/python/scripts/generate.sh [OUT_ROOT]
#   The code lands in OUT_ROOT/clients/python/src/engram_memory/_gen (OUT_ROOT
#   defaults to the repository root; a relative OUT_ROOT is taken from the
#   repository root).
set -euo pipefail
cd "$(dirname "$0")/../../.."
py=clients/python
if [ ! -x "$py/.venv/bin/python" ]; then
  python3 -m venv "$py/.venv"
fi
# Install the pinned generators only when they are missing or differ.
if ! "$py/.venv/bin/python" - "$py/requirements-gen.txt" <<'PYEOF' >/dev/null 2>&1
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if line:
        name, want = line.split("==")
        if version(name) != want:
            sys.exit(1)
PYEOF
then
  "$py/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$py/requirements-gen.txt" >&2
fi
npx buf generate --template "$py/buf.gen.yaml" -o "${1:-.}"
"$py/.venv/bin/python" "$py/scripts/generate_sync.py" "${1:-.}"
