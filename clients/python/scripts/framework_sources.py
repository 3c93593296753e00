#!/usr/bin/env python3
"""Fetches the frameworks' own test files: the source distribution of each framework
at the version installed in this venv (pinned in constraints.txt), from the package
index through pip, unpacked under .venv/framework-sources (kept until the pin moves).

Run by scripts/test.sh; tests/test_framework_suites.py runs the tests it unpacks.
`framework_sources.py DIST` prints where DIST's source is.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(__file__).resolve().parents[1] / ".venv" / "framework-sources"
#: The distributions whose sdists carry the test files the harness runs.
DISTS = ("langgraph-checkpoint", "langchain-core", "openai-agents")


def source_dir(dist: str) -> Path:
    """The unpacked sdist of ``dist`` at its installed version (downloaded once)."""
    version = importlib.metadata.version(dist)
    root = CACHE / f"{dist}-{version}"
    done = root / ".engram-complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{dist}=={version}",
                "-d",
                tmp,
            ],
            check=True,
        )
        (archive,) = Path(tmp).glob("*.tar.gz")
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        top.rename(root)
    done.touch()
    return root


def main() -> None:
    for dist in sys.argv[1:] or DISTS:
        print(source_dir(dist))


if __name__ == "__main__":
    main()
