"""Blocking clients over grpc sync channels: the same methods as the async ones.

``engram_memory.sync.EngramMemory`` is the sync KAOS API (also exported as
``engram_memory.EngramMemorySync``); ``engram_memory.sync.EngramClient`` the
low-level one (``engram_memory.EngramClientSync``). Both are generated from
the async clients (client.py, memory.py) by scripts/generate_sync.py into
engram_memory._gen.sync: change the async source, then regenerate.
"""
from __future__ import annotations

from ._gen.sync.client import EngramClientSync
from ._gen.sync.memory import EngramMemorySync

__all__ = ["EngramClient", "EngramClientSync", "EngramMemory", "EngramMemorySync"]

#: ``engram_memory.sync.EngramClient`` / ``engram_memory.sync.EngramMemory``.
EngramClient = EngramClientSync
EngramMemory = EngramMemorySync
