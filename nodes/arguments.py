"""The one parser of tool-call arguments: strict JSON, one meaning, one canonical text.

A model sends a call's arguments as JSON text. Python's `json.loads` keeps the last
of two equal keys, while a person reading the text sees the first: so a call is
parsed here, once, strictly, and everything downstream (the tools, the review, the
approval hash, history) uses the parsed value or its canonical text (INVARIANTS I12).

Refused as ambiguous: a key given twice in any object at any depth, `NaN` and
`Infinity` (not JSON), and lone UTF-16 surrogates in a key or string (no text can
hold them, so what is shown could not be what is written).
"""

from __future__ import annotations

import json
from typing import Any


class ArgumentsError(ValueError):
    """Arguments that do not have exactly one meaning; the message says why."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ArgumentsError(f"key {key!r} is given twice; send each key once")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ArgumentsError(f"{name} is not a JSON value")


def _check_text(value: Any) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ArgumentsError("a string holds a lone surrogate escape (\\ud800-\\udfff)"
                                 ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


def parse_arguments(text: Any) -> dict[str, Any]:
    """The arguments of a tool call as a dict, parsed strictly (see module doc).

    Args:
        text: The call's `function.arguments`; an empty or missing value means `{}`.

    Raises:
        ArgumentsError: Not JSON text, not an object, or ambiguous.
    """
    if text is None or text == "":
        return {}
    if not isinstance(text, str):
        raise ArgumentsError("arguments must be JSON text")
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except ArgumentsError:  # from the hooks (a ValueError too): keep its own reason
        raise
    except json.JSONDecodeError as exc:
        raise ArgumentsError(f"arguments are not valid JSON: {exc.msg}") from None
    except ValueError as exc:  # an integer past Python's digit limit (CVE-2020-10735)
        raise ArgumentsError(f"arguments hold an unusable number: {exc}") from None
    except RecursionError:
        raise ArgumentsError("arguments are nested too deeply") from None
    if not isinstance(value, dict):
        raise ArgumentsError("arguments must be a JSON object")
    _check_text(value)
    return value


def canonical(args: dict[str, Any]) -> str:
    """The canonical text of parsed arguments: sorted keys, no spaces, UTF-8 kept as is.

    These are the exact characters a reviewer is shown and the approval hash covers.
    """
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
