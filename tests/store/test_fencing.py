"""The fencing hook (`graph.store.base.WriterLocks.fence`): the one place a second writer is stopped.

A store that does not hold a thread's writer lock, while another store does, can write
none of the thread's rows: not its ledger row, not a checkpoint or a pending write
(INVARIANTS I8). Nothing is written; once the holder lets go, the same write passes.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from graph.errors import BusyError
from graph.store import open_store


def test_a_write_by_a_store_not_holding_the_threads_lock_is_refused(backend: Any) -> None:
    thread_id = f"fence-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with open_store(backend.db, create=True) as holder, open_store(backend.db, create=True) as other:
        with holder.locks.hold(thread_id):
            with pytest.raises(BusyError):
                other.ledger.create(thread_id, 3)
            with pytest.raises(BusyError):
                other.ledger.count(thread_id)
            with pytest.raises(BusyError):
                other.checkpointer.put(config, empty_checkpoint(), {"source": "input", "step": -1},
                                       {})
            with pytest.raises(BusyError):
                other.checkpointer.put_writes({"configurable": {
                    "thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": "x"}},
                    [("messages", [])], "task")
            assert other.ledger.read(thread_id) is None
            assert other.count_checkpoints(thread_id) == 0
            assert holder.ledger.create(thread_id, 3).attempts == 0  # the holder writes
            holder.ledger.delete(thread_id)
            holder.commit()
        assert other.ledger.create(thread_id, 3).max_attempts == 3  # nobody holds it now


def test_a_trim_or_a_thread_deletion_by_a_store_not_holding_the_lock_is_refused(
        backend: Any) -> None:
    """The checkpoint window's trim and LangGraph's `delete_thread` go through the fence too."""
    thread_id = f"fence-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with open_store(backend.db, create=True) as holder, open_store(backend.db, create=True) as other:
        with holder.locks.hold(thread_id):
            for step in range(1, 4):
                config = holder.checkpointer.put(config, empty_checkpoint(),
                                                 {"source": "loop", "step": step}, {})
            holder.commit()
            with pytest.raises(BusyError):
                other.trim(thread_id, 1)
            with pytest.raises(BusyError):
                other.checkpointer.delete_thread(thread_id)
            assert other.count_checkpoints(thread_id) == 3
        assert other.trim(thread_id, 1) == 2  # nobody holds it now
        other.checkpointer.delete_thread(thread_id)
        assert other.count_checkpoints(thread_id) == 0
