"""A function a crafted checkpoint would call if deserialization were not strict."""

from pathlib import Path


def mark(path: str) -> str:
    Path(path).write_text("the crafted checkpoint ran code")
    return path
