"""The SQLite backend: one checkpoint file, checked before it is opened, with per-thread locks."""
