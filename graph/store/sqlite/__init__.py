"""The SQLite backend: one checkpoint file, checked before it is opened, with per-thread locks."""

__all__: list[str] = []
