"""Explicit, step-by-step migrations of stored state to the current schema version.

Migrations run in memory on load; `graph.step.advance` writes the migrated `thread` channel
with the thread's next checkpoint, and older checkpoints stay as written (history
migrates them again when it reads them). A version newer than `SCHEMA_VERSION`, or
one with no migration path, is refused as `incompatible`, never defaulted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph.errors import ErrorCode, RefusedError
from nodes.state import DEFAULT_CONTEXT_TOKENS, DEFAULT_KEEP_CHECKPOINTS, SCHEMA_VERSION

V1_GRAPH = "nodes=budget,reason,tools;tools=get_reference,list_references,search_references"
"""The node and tool set of every schema v1 thread (v1 stored no signature)."""


def _v1_to_v2(values: dict[str, Any]) -> dict[str, Any]:
    """v2 stores the graph signature; every v1 thread ran the v1 graph."""
    return {**values, "thread": {**values["thread"], "schema_version": 2, "graph": V1_GRAPH}}


def _v2_to_v3(values: dict[str, Any]) -> dict[str, Any]:
    """v3 stores the workspace and the token limits; v2 threads had none of them."""
    return {**values, "thread": {**values["thread"], "schema_version": 3, "workspace": None,
                                 "max_tokens": None, "context_tokens": DEFAULT_CONTEXT_TOKENS}}


def _v3_to_v4(values: dict[str, Any]) -> dict[str, Any]:
    """v4 stores the writable folder; v3 threads had no write tools."""
    return {**values, "thread": {**values["thread"], "schema_version": 4, "allow_writes": None}}


def _v4_to_v5(values: dict[str, Any], thread_id: str) -> dict[str, Any]:
    """v5 stores the thread id; a v4 thread takes the id it is read under."""
    return {**values, "thread": {**values["thread"], "schema_version": 5, "thread_id": thread_id}}


def _v5_to_v6(values: dict[str, Any]) -> dict[str, Any]:
    """v6 stores the checkpoint window; a v5 thread gets the default, so it is trimmed too."""
    return {**values, "thread": {**values["thread"], "schema_version": 6,
                                 "keep_checkpoints": DEFAULT_KEEP_CHECKPOINTS}}


STEPS: dict[int, Callable[..., dict[str, Any]]] = {
    1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6}
_NEEDS_THREAD_ID = {4}
"""`STEPS[n]` turns version n into version n + 1."""


def migrate(values: dict[str, Any], thread_id: str) -> tuple[dict[str, Any], int]:
    """Brings stored values, read under `thread_id`, to `SCHEMA_VERSION`.

    Returns:
        The migrated values (a new dict; the input is not changed) and the version
        they were stored with.

    Raises:
        RefusedError: `incompatible` for a missing, non-integer, newer or unknown
            version, `damaged` when the values are not even a dict with a `thread`.
    """
    thread = values.get("thread") if isinstance(values, dict) else None
    if not isinstance(thread, dict):
        raise RefusedError("stored state has no thread identity", error_code=ErrorCode.DAMAGED)
    version = thread.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RefusedError(f"stored schema version {version!r} is not a known version",
                           error_code=ErrorCode.INCOMPATIBLE)
    if version > SCHEMA_VERSION:
        raise RefusedError(
            f"written by schema version {version}; this program knows versions up to "
            f"{SCHEMA_VERSION}: upgrade mandapi-resume", error_code=ErrorCode.INCOMPATIBLE)
    stored, current = version, values
    while version < SCHEMA_VERSION:
        if version not in STEPS:
            raise RefusedError(f"no migration from schema version {version}",
                               error_code=ErrorCode.INCOMPATIBLE)
        step = STEPS[version]
        current = step(current, thread_id) if version in _NEEDS_THREAD_ID else step(current)
        version += 1
    return current, stored
