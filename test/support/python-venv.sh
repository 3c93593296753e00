#!/usr/bin/env bash
# Makes (or refreshes) .tmp/<name>-venv, a test Python environment, from the
# exact pins in test/support/<name>-requirements.txt, and prints its python's
# path. Reinstalls only when the pins, the Python or this script changed.
# Tests call it through venvPython() (test/support/python-venv.ts); several
# at once wait for one another on a lock the kernel drops should the
# installer die.
set -euo pipefail
name=${1:?usage: python-venv.sh <name> (installs test/support/<name>-requirements.txt)}
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
venv=.tmp/$name-venv
requirements=test/support/$name-requirements.txt
mkdir -p .tmp
exec 9>".tmp/$name-venv.lock"
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
