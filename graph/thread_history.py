"""Deprecated name of `graph.threads.history`, kept for one release (README: "Moved names").

Importing it warns (`DeprecationWarning`); every name of `graph.threads.history` is reached
through it unchanged.
"""

import warnings
from typing import Any

import graph.threads.history as _moved

warnings.warn("graph.thread_history moved to graph.threads.history; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


__all__ = list(getattr(_moved, "__all__", [n for n in vars(_moved) if not n.startswith("_")]))
"""What `from graph.thread_history import *` gives: the new module's public names."""


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
