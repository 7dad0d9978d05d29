"""Deprecated name of `graph.fleet.tasks_file`, kept for one release (README: "Moved names").

Importing it warns (`DeprecationWarning`); every name of `graph.fleet.tasks_file` is reached
through it unchanged.
"""

import warnings
from typing import Any

import graph.fleet.tasks_file as _moved

warnings.warn("graph.tasks_file moved to graph.fleet.tasks_file; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


__all__ = list(getattr(_moved, "__all__", [n for n in vars(_moved) if not n.startswith("_")]))
"""What `from graph.tasks_file import *` gives: the new module's public names."""


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
