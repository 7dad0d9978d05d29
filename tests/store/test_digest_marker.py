"""One character changed in the digest marker never switches digest checking off.

SQL databases mark the checkpoint id before which checkpoints have no digest (a row of
`checkpoint_digests`, `graph.store.digest.SqlDigests.marker`); Redis marks the id from which
on checkpoint documents have a whole-document digest (`graph.store.redis.digests.DOCUMENTS_SINCE`).
A checkpoint that has its digest is checked whatever the marker says, so a marker moved
(one character changed) and an edit that only the digest catches are still refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from graph.store.redis.digests import DOCUMENTS_SINCE
from graph.store.serde import make_serde
from tests.conftest import run_cli
from tests.redis_adapter import latest_key
from tests.sealing import checksummed_dumps

TASK = "How long does shipping take at the demo shop?"
MARKER_ROW = ("UPDATE checkpoint_digests SET digest = ? WHERE thread_id = '' AND "
              "checkpoint_ns = '' AND checkpoint_id = '' AND task_id = '' AND idx = 0")


def _one_char(marker: str, how: str) -> str:
    index = {"first": 0, "middle": 8, "last": len(marker) - 1}[how]
    changed = {"first": "f", "middle": "0", "last": "0" if marker[-1] != "0" else "1"}[how]
    return marker[:index] + changed + marker[index + 1:]


def _marker(backend: Any) -> str:
    if backend.name == "redis":
        return backend._client.get(DOCUMENTS_SINCE).decode()
    from graph.store import open_store

    with open_store(backend.db, create=False) as store:
        return store.checkpointer.digests.marker()


def _set_marker(backend: Any, value: str) -> None:
    if backend.name == "redis":
        backend._client.set(DOCUMENTS_SINCE, value)
    else:
        backend.execute(MARKER_ROW, (value,))


def _edit_without_digest(backend: Any, thread_id: str) -> None:
    """Changes one stored value of the latest checkpoint that only its digest covers."""
    if backend.name == "redis":
        key = latest_key(backend._client, thread_id)
        stamp = backend._client.json().get(key, "$.checkpoint_ts")[0]
        backend._client.json().set(key, "$.checkpoint_ts", stamp + 1)
    elif backend.name == "sqlite":
        checkpoint = make_serde().loads_typed(backend.get_raw(thread_id, ""))
        checkpoint["channel_values"]["messages"][0]["content"] += " (edited)"
        backend.set_raw(thread_id, "", *checksummed_dumps(checkpoint))
    else:
        messages = make_serde().loads_typed(backend.get_raw(thread_id, "messages"))
        messages[0]["content"] += " (edited)"
        backend.set_raw(thread_id, "messages", *checksummed_dumps(messages))


@pytest.mark.parametrize("how", ["first", "middle", "last"])
def test_a_marker_changed_by_one_character_still_leaves_a_digested_edit_refused(
        backend: Any, how: str) -> None:
    assert run_cli(["--thread", "dm", "--task", TASK, "--once", "--db", backend.db])[
        "exit_code"] == 0
    marker = _marker(backend)
    _set_marker(backend, _one_char(marker, how))
    _edit_without_digest(backend, "dm")
    out = run_cli(["--thread", "dm", "--once", "--db", backend.db])
    assert (out["exit_code"], out["error_code"]) == (4, "damaged"), out
