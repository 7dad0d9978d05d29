"""Deprecated name of `graph.fleet.tasks_file`, kept for one release (README: "Moved names").

Importing it warns (`DeprecationWarning`); every name of `graph.fleet.tasks_file` is reached
through it unchanged.
"""

import warnings
from typing import Any

import graph.fleet.tasks_file as _moved

warnings.warn("graph.tasks_file moved to graph.fleet.tasks_file; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
