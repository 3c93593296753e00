"""Blocking clients over grpc sync channels: the same methods as the async ones.

``engram_memory.sync.EngramMemory`` is the sync KAOS API (also exported as
``engram_memory.EngramMemorySync``); ``engram_memory.sync.EngramClient`` the
low-level one (``engram_memory.EngramClientSync``);
``engram_memory.sync.KnowledgeGraph`` the fact store (``engram_memory.KnowledgeGraphSync``).
All are generated from the async sources (client.py, memory.py, kg.py) by scripts/generate_sync.py into
engram_memory._gen.sync: change the async source, then regenerate.
"""

from __future__ import annotations

from ._gen.sync.client import EngramClientSync
from ._gen.sync.kg import KnowledgeGraphSync
from ._gen.sync.memory import EngramMemorySync

__all__ = [
    "EngramClient",
    "EngramClientSync",
    "EngramMemory",
    "EngramMemorySync",
    "KnowledgeGraph",
    "KnowledgeGraphSync",
]

#: ``engram_memory.sync.EngramClient`` / ``engram_memory.sync.EngramMemory``.
EngramClient = EngramClientSync
EngramMemory = EngramMemorySync
#: ``engram_memory.sync.KnowledgeGraph``.
KnowledgeGraph = KnowledgeGraphSync
