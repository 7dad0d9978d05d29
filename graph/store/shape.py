"""The shape LangGraph writes, checked on every checkpoint this program loads.

The metadata column, the checkpoint itself (LangGraph's keys and types, and the
channels a state checkpoint always holds) and the pending writes (an `__interrupt__`
write must be a non-empty list of real `Interrupt` records pausing write calls for
review). Each check raises `ValueError` naming what is wrong; `graph.store.saver`
turns that into a refusal naming the checkpoint.
"""

from __future__ import annotations

from typing import Any

from langgraph.types import Interrupt

__all__ = ["check_checkpoint", "check_metadata", "check_writes"]

STATE_CHANNELS = frozenset({"thread", "messages", "progress"})
"""Channels every checkpoint after the input holds (the graph writes all three first)."""
_SOURCES = frozenset({"input", "loop", "update", "fork"})
_CHECKPOINT_KEYS = frozenset({"v", "id", "ts", "channel_values", "channel_versions",
                              "versions_seen"})
_PENDING_KEYS = frozenset({"tool_call_id", "name", "arguments", "sha256"})


def _version(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _str_dict(value: Any, check: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and check(v)
                                           for k, v in value.items())


def check_metadata(metadata: Any) -> None:
    """Refuses metadata unlike LangGraph's `{source, step, parents}`.

    Raises:
        ValueError: What is wrong.
    """
    if not isinstance(metadata, dict):
        raise ValueError(f"its metadata is {type(metadata).__name__}, not an object")
    if set(metadata) != {"source", "step", "parents"}:
        raise ValueError(f"its metadata has keys {sorted(metadata)}, not source, step, parents")
    step = metadata["step"]
    if metadata["source"] not in _SOURCES:
        raise ValueError(f"its metadata source {metadata['source']!r} is unknown")
    if not isinstance(step, int) or isinstance(step, bool) or step < -1:
        raise ValueError(f"its metadata step {step!r} is not a step number")
    if not _str_dict(metadata["parents"], lambda v: isinstance(v, str)):
        raise ValueError("its metadata parents are not checkpoint ids by namespace")


def check_checkpoint(checkpoint: Any, checkpoint_id: str, source: str) -> None:
    """Refuses a checkpoint unlike LangGraph's, or a state checkpoint lacking a channel.

    Raises:
        ValueError: What is wrong.
    """
    if not isinstance(checkpoint, dict):
        raise ValueError(f"it is {type(checkpoint).__name__}, not a checkpoint")
    keys = set(checkpoint) - {"updated_channels"}
    if keys != _CHECKPOINT_KEYS:
        raise ValueError(f"it has keys {sorted(checkpoint)}, not LangGraph's")
    if checkpoint["id"] != checkpoint_id:
        raise ValueError(f"its id {checkpoint['id']!r} is not the row's id")
    if not isinstance(checkpoint["v"], int) or not isinstance(checkpoint["ts"], str):
        raise ValueError("its version or timestamp has the wrong type")
    if not _str_dict(checkpoint["channel_versions"], _version):
        raise ValueError("its channel_versions are not versions by channel")
    if not _str_dict(checkpoint["versions_seen"], lambda v: _str_dict(v, _version)):
        raise ValueError("its versions_seen are not versions by node")
    updated = checkpoint.get("updated_channels")
    if updated is not None and not (isinstance(updated, list)
                                    and all(isinstance(c, str) for c in updated)):
        raise ValueError("its updated_channels are not channel names")
    values = checkpoint["channel_values"]
    if not _str_dict(values, lambda v: True):
        raise ValueError("its channel_values are not values by channel")
    missing = STATE_CHANNELS - set(values)
    if source != "input" and missing:
        raise ValueError(f"its state lacks channel(s) {sorted(missing)} the graph always writes")


def _check_interrupt(value: Any) -> None:

    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError("its __interrupt__ write is not a non-empty list of interrupts")
    for item in value:
        if not isinstance(item, Interrupt) or not isinstance(item.id, str):
            raise ValueError(f"its __interrupt__ write holds {type(item).__name__}, "
                             "not a LangGraph Interrupt record")
        payload = item.value
        if (not isinstance(payload, dict) or set(payload) != {"kind", "pending"}
                or payload["kind"] != "approval" or not isinstance(payload["pending"], list)
                or not payload["pending"]
                or not all(isinstance(p, dict) and set(p) == _PENDING_KEYS
                           and all(isinstance(p[k], str) for k in _PENDING_KEYS)
                           for p in payload["pending"])):
            raise ValueError("its __interrupt__ write is not a review of write calls")


def check_writes(writes: Any) -> None:
    """Refuses pending writes unlike LangGraph's `(task id, channel, value)` triples.

    Raises:
        ValueError: What is wrong.
    """
    for write in writes or ():
        if (not isinstance(write, tuple) or len(write) != 3 or not isinstance(write[0], str)
                or not isinstance(write[1], str)):
            raise ValueError("a pending write is not (task id, channel, value)")
        if write[1] == "__interrupt__":
            _check_interrupt(write[2])
