r"""Text for a terminal: stored or model-written characters never act as terminal controls.

A reply, a tool's observation or a server's message can hold `ESC[2J` (clear the
screen), an OSC 52 sequence (set the clipboard), `\r` or a C1 control such as U+009B
(the one-byte CSI): printed raw, it runs in the reader's terminal. `graph.cli.emit`,
the one place the commands print, passes every line through `escape_controls`; when
the reader goes away (`| head -1`), `silence` quiets the stream.
"""

from __future__ import annotations

import os
import re
from typing import TextIO

from nodes.redaction import REDACTED, key_to_scrub

__all__ = ["escape_controls", "silence", "without_key"]

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls except tab and newline, DEL, C1 controls, and the bidirectional marks,
embeddings, overrides and isolates (text that reads otherwise than it is stored)."""


def escape_controls(text: str) -> str:
    r"""`text` with each control character written as its `\uXXXX` escape.

    Tab and newline are kept. The escape is also how JSON spells the character, so a
    JSON document stays valid and decodes to the same value: `json.dumps` escapes C0
    controls itself, but with `ensure_ascii=False` leaves C1 and bidirectional ones raw.
    """
    return _CONTROLS.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def without_key(text: str) -> str:
    """`text` with `MANDAPI_API_KEY`'s value, if set, written as `[redacted: API key]` (I9).

    The last net of every output (printed lines, progress, `batch --out`): whatever
    echoed the key (an argument, a tasks line's thread id), it is never shown or written.
    """
    key = key_to_scrub(os.environ.get("MANDAPI_API_KEY"))
    return text.replace(key, REDACTED) if key and key in text else text


def silence(stream: TextIO) -> None:
    """Points `stream`'s descriptor at /dev/null, after its reader went away.

    After a `BrokenPipeError`, later writes and the interpreter's final flush are then
    discarded quietly (what CPython's documentation recommends for a closed pipe).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)
