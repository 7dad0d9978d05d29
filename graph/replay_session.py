"""Deprecated name of `graph.replay.session`, kept for one release (README: "Moved names").

Importing it warns (`DeprecationWarning`); every name of `graph.replay.session` is reached
through it unchanged.
"""

import warnings
from typing import Any

import graph.replay.session as _moved

warnings.warn("graph.replay_session moved to graph.replay.session; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
