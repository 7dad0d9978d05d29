"""Deprecated name of `graph.replay.session`, kept for one release (README: "Moved names").

Importing it warns (`DeprecationWarning`); every name of `graph.replay.session` is reached
through it unchanged.
"""

import warnings
from typing import Any

import graph.replay.session as _moved

warnings.warn("graph.replay_session moved to graph.replay.session; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


__all__ = list(getattr(_moved, "__all__", [n for n in vars(_moved) if not n.startswith("_")]))
"""What `from graph.replay_session import *` gives: the new module's public names."""


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
