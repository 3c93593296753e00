# Generated from engram_memory/client.py, memory.py, kg.py by clients/python/scripts/generate_sync.py (unasync). DO NOT EDIT.
"""The blocking clients, generated from the async ones: import them from engram_memory.sync."""
