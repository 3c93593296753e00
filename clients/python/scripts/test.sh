#!/usr/bin/env bash
# Tests of the Python client (run by the repository's `npm test` from the
# repository root): makes clients/python/.venv (scripts/venv.sh), checks that
# the committed sync clients are what scripts/generate_sync.py derives from the
# async ones, type-checks the package and its tests (mypy --strict), lints and
# format-checks the hand-written code (ruff; both configured in pyproject.toml),
# fetches the frameworks' own test files (scripts/framework_sources.py), then runs pytest
# against real servers started from the repository (node_modules/.bin/tsx
# src/main.ts). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh
.venv/bin/python scripts/generate_sync.py --check
.venv/bin/python -m mypy
.venv/bin/ruff check src tests scripts scripts/protoc-gen-engram-python
.venv/bin/ruff format --check src tests scripts scripts/protoc-gen-engram-python
# The frameworks' own test files (their sdists at the pinned versions), for tests/test_framework_suites.py.
.venv/bin/python scripts/framework_sources.py >/dev/null
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
