#!/usr/bin/env python3
"""Writes the sync clients (engram_memory._gen.sync) from the async ones with unasync.

The async ``client.py``, ``memory.py`` and ``kg.py`` are the one source of both flavours:
unasync (pinned in requirements-gen.txt) drops ``async``/``await``, turns
``__aenter__``/``AsyncIterator``/... into their sync names and applies
REPLACEMENTS below, which swap the I/O module ``_async_io`` for ``_sync_io``
and rename the classes. Nothing else may differ, so nothing can drift.

Usage: generate_sync.py [--check] [OUT_ROOT]
  Writes OUT_ROOT/clients/python/src/engram_memory/_gen/sync (OUT_ROOT: the
  repository root by default). With --check it writes nothing and fails,
  naming the files, when the committed sync clients differ from what it
  would write.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import unasync

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "engram_memory"
#: The package-relative path of the generated code.
SYNC_DIR = Path("_gen") / "sync"
#: The async modules, each written again under SYNC_DIR with the same name.
SOURCES = ("client.py", "memory.py", "kg.py")
#: Names unasync renames besides its own (async context managers, iterators, generators).
REPLACEMENTS = {
    "_async_io": "_sync_io",
    "EngramClient": "EngramClientSync",
    "EngramMemory": "EngramMemorySync",
    "KnowledgeGraph": "KnowledgeGraphSync",
    "MemoryServiceAsyncStub": "MemoryServiceStub",
    "aclose": "close",
}
HEADER = "# Generated from engram_memory/{name} by clients/python/scripts/generate_sync.py (unasync). DO NOT EDIT.\n"
INIT_TEXT = '"""The blocking clients, generated from the async ones: import them from engram_memory.sync."""\n'


def generated() -> dict[str, str]:
    """The text of every file of SYNC_DIR, by file name."""
    files = {"__init__.py": HEADER.format(name="client.py, memory.py, kg.py") + INIT_TEXT}
    with tempfile.TemporaryDirectory() as tmp:
        rule = unasync.Rule(fromdir=f"{PACKAGE}/", todir=f"{tmp}/", additional_replacements=REPLACEMENTS)
        unasync.unasync_files([str(PACKAGE / name) for name in SOURCES], [rule])
        for name in SOURCES:
            files[name] = HEADER.format(name=name) + (Path(tmp) / name).read_text(encoding="utf-8")
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    roots = [a for a in argv if a != "--check"]
    out_root = Path(roots[0]) if roots else PACKAGE.parents[3]
    out = out_root / PACKAGE.relative_to(PACKAGE.parents[3]) / SYNC_DIR
    stale = []
    for name, text in generated().items():
        path = out / name
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale sync client: {', '.join(stale)}", file=sys.stderr)
        print(
            "regenerate: clients/python/scripts/generate.sh (or just scripts/generate_sync.py), then commit",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
