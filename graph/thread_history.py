"""Deprecated name of `graph.threads.history`, kept for one release (README: "Moved names").

Importing it warns (`DeprecationWarning`); every name of `graph.threads.history` is reached
through it unchanged.
"""

import warnings
from typing import Any

import graph.threads.history as _moved

warnings.warn("graph.thread_history moved to graph.threads.history; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
