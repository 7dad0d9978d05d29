"""Fail-closed reading of stored threads: load, integrity, migrations, update checks."""
