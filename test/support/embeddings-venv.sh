#!/usr/bin/env bash
# Makes (or refreshes) .tmp/embeddings-venv, the Python environment of the test
# embedding server (test/support/embeddings-server.py), from the exact pins
# in test/support/embeddings-requirements.txt, and prints its python's path.
# Reinstalls only when the pins, the server's Python or this script changed.
# Test files call it through startEmbeddingsServer(); several at once wait
# for one another on a lock the kernel drops should the installer die.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
venv=.tmp/embeddings-venv
requirements=test/support/embeddings-requirements.txt
mkdir -p .tmp
exec 9>.tmp/embeddings-venv.lock
flock 9
want=$( (cat "$requirements" "$0"; "$py" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)
stamp=$venv/.engram-deps
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  # --no-deps: the requirements list every package; --only-binary: never build from source.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --no-deps --only-binary=:all: -r "$requirements" >&2
  echo "$want" >"$stamp"
fi
echo "$PWD/$venv/bin/python"
