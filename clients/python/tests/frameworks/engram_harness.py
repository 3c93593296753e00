"""pytest plugin shared by the framework suites (tests/test_framework_suites.py runs them).

A suite is a framework's own test files, read from its source distribution, run
with one of their fixtures swapped for the Engram adapter (the suite's own
plugin module does the swap). This module gives those plugins their clients of
the real server (``ENGRAM_TARGET``) and marks the failures listed for the suite
(``ENGRAM_SUITE``) in expected_failures.txt as strict xfails: a new failure, or
a listed one that now passes, fails the run.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from engram_memory import EngramClient, EngramClientSync

EXPECTED_FAILURES = Path(__file__).with_name("expected_failures.txt")

_async_client: EngramClient | None = None
_sync_client: EngramClientSync | None = None


def target() -> str:
    return os.environ["ENGRAM_TARGET"]


def async_client() -> EngramClient:
    """One async client for the run (it keeps a channel per event loop).

    Its calls carry no deadline: some suites freeze ``time.time``, from which
    gRPC would date every deadline (pytest-timeout bounds each test instead).
    """
    global _async_client
    if _async_client is None:
        _async_client = EngramClient(target(), timeout=None)
    return _async_client


def sync_client() -> EngramClientSync:
    global _sync_client
    if _sync_client is None:
        _sync_client = EngramClientSync(target(), timeout=20)
    return _sync_client


_backends_made = 0


def fresh_name(prefix: str) -> str:
    """A name no other test uses, so every swapped-in backend starts empty, as the framework's own does.

    Every swapped-in backend asks for one: the run fails when none did (the
    swap no longer reaches the tests, which would then pass on the framework's
    own backend).
    """
    global _backends_made
    _backends_made += 1
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def expected_failures(suite: str) -> dict[str, str]:
    """Test id (relative to the sdist's root) -> why it fails against Engram, for ``suite``."""
    found: dict[str, str] = {}
    for line in EXPECTED_FAILURES.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        entry, _, why = line.partition(" -- ")
        name, test_id = entry.split()
        if name == suite:
            found[test_id] = why.strip()
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = expected_failures(os.environ["ENGRAM_SUITE"])
    seen = set()
    for item in items:
        why = listed.get(item.nodeid)
        if why is not None:
            seen.add(item.nodeid)
            item.add_marker(pytest.mark.xfail(reason=why, strict=True))
    missing = sorted(set(listed) - seen)
    if missing:
        raise pytest.UsageError(f"expected_failures.txt lists tests that do not exist: {missing}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _backends_made == 0 and session.testscollected:
        print("\nno test made an Engram-backed backend: the fixture swap did not take")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    if _sync_client is not None:
        _sync_client.close()
