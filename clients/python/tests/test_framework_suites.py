"""The frameworks' own tests, run against a real Engram with only a fixture swapped.

Each suite is test files of a framework's source distribution (at the version
pinned in constraints.txt, fetched by scripts/framework_sources.py, never copied
here), run by pytest in a process of its own with a plugin of tests/frameworks
that swaps the framework's in-memory backend for the Engram adapter, against
this session's server. Failures the adapter cannot pass are listed, with why,
in tests/frameworks/expected_failures.txt (and the README); any other failure,
or a listed test that passes, fails the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram_server import EngramServer

HERE = Path(__file__).resolve().parent
FETCH = HERE.parent / "scripts" / "framework_sources.py"


@dataclass(frozen=True)
class Suite:
    dist: str
    plugin: str
    files: tuple[str, ...]


SUITES = {
    "langgraph-store": Suite("langgraph-checkpoint", "swap_langgraph_store", ("tests/test_store.py",)),
    "langchain-chat-history": Suite(
        "langchain-core",
        "swap_langchain_history",
        ("tests/unit_tests/chat_history/test_chat_history.py", "tests/unit_tests/runnables/test_history.py"),
    ),
    "openai-agents-session": Suite(
        "openai-agents",
        "swap_openai_agents_session",
        (
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            "tests/memory/test_compaction_suffix.py",
            "tests/extensions/memory/test_encrypt_session.py",
            "tests/test_tool_batch_failure_history.py",
            "tests/test_native_tool_failure_history.py",
        ),
    ),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(SUITES))
def test_the_frameworks_own_suite_passes_against_engram(name: str, server: EngramServer) -> None:
    suite = SUITES[name]
    fetched = subprocess.run([sys.executable, str(FETCH), suite.dist], capture_output=True, text=True, check=True)
    root = Path(fetched.stdout.strip())
    env = {
        **os.environ,
        "ENGRAM_TARGET": server.target,
        "ENGRAM_SUITE": name,
        "PYTHONPATH": os.pathsep.join([str(HERE / "frameworks"), str(root)]),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-c",
            str(HERE / "frameworks" / "pytest.ini"),
            "--rootdir",
            str(root),
            "-p",
            suite.plugin,
            *suite.files,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    summary = [line for line in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|xfailed)", line)]
    print(f"{name}: {summary[-1] if summary else 'no summary'}")
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
