"""Fail-closed reading of stored threads: load, integrity, update checks.

Stored state is migrated in memory on load by `graph.store.migrations`.
"""

__all__: list[str] = []
