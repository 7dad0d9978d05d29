"""A parent task's result: the answers of its subtask threads (`PARENT:sub_N`), in order.

`python -m graph.batch parts.jsonl --parent ID` runs each line as the thread
`ID:sub_0`, `ID:sub_1`, ... (`graph.fleet.tasks_file.subtask_id`). Each subtask keeps its own
checkpoint, budget and answer, so the parent's result is read back from them at any
time (`graph.history --thread ID`), never kept as a copy that could disagree.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from graph.checkpoints.load import graph_of, load_thread
from graph.errors import RefusedError
from nodes.state import FINAL_STATUSES

if TYPE_CHECKING:
    from graph.store.base import Store

__all__ = ["parent_result", "render_parent", "stored_parent_result"]

PRUNED = "pruned"
"""The status shown for a subtask pruned after it finished (its answer is gone)."""


def parent_result(parent: str, subtasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The parent task's result: `done` with every subtask answer in order once all finished.

    Args:
        parent: The parent's id.
        subtasks: `{thread_id, status, answer}` per subtask, in subtask order; status None
            for one that does not exist (yet).

    Returns:
        `{"parent", "status" ("done" or "running"), "subtasks": [{thread_id, status,
        answer}...], "answers": [...] (only when done), "review_required"}`. A pruned
        subtask counts as finished, with answer None.
    """
    rows = [{"thread_id": s["thread_id"], "status": s["status"], "answer": s["answer"]}
            for s in subtasks]
    finished = all(s["status"] in (*FINAL_STATUSES, PRUNED) for s in rows)
    result: dict[str, Any] = {"parent": parent, "status": "done" if finished else "running",
                              "subtasks": rows}
    if finished:
        result["answers"] = [s["answer"] for s in rows]
        result["review_required"] = any(a is not None for a in result["answers"])
    return result


def stored_parent_result(store: Store, parent: str) -> dict[str, Any] | None:
    """The parent's result read from its subtask threads in `store`; None when it has none.

    Subtasks are the threads `PARENT:sub_N` (checkpoints, ledger rows or tombstones),
    ordered by N; a number missing between two found ones is shown with status None, so
    the result stays `running`. Subtasks a batch never started (it was stopped before
    them) are not known here: the batch that runs them reports them.

    Raises:
        RefusedError: Never for a subtask: one that fails its checks is shown with the
            status `unreadable: CODE`.
    """
    pattern = re.compile(re.escape(parent) + r":sub_(0|[1-9][0-9]{0,8})")
    found = {int(m.group(1)): thread_id for thread_id in store.thread_ids()
             if (m := pattern.fullmatch(thread_id))}
    if not found:
        return None
    pruned = store.tombstones.thread_ids()
    subtasks = []
    for index in range(max(found) + 1):
        thread_id = found.get(index, f"{parent}:sub_{index}")
        row: dict[str, Any] = {"thread_id": thread_id, "status": None, "answer": None}
        if thread_id in pruned:
            row["status"] = PRUNED
        elif index in found:
            try:
                loaded = load_thread(graph_of(store), thread_id, store.location)
            except RefusedError as exc:
                row["status"] = f"unreadable: {exc.error_code}"
            else:
                if loaded is not None:
                    progress = loaded.values["progress"]
                    row.update(status=progress["status"], answer=progress["answer"])
        subtasks.append(row)
    return parent_result(parent, subtasks)


def render_parent(result: dict[str, Any]) -> list[str]:
    """The text lines of a parent's result (`graph.history`, `graph.batch`)."""
    subtasks = result["subtasks"]
    finished = sum(s["status"] in (*FINAL_STATUSES, PRUNED) for s in subtasks)
    lines = [f"parent   {result['parent']}",
             f"status   {result['status']} ({finished} of {len(subtasks)} subtasks finished)"]
    for number, sub in enumerate(subtasks, 1):
        lines.append(f"{number:>3}. {sub['thread_id']}  {sub['status'] or 'not started'}")
        if sub["answer"] is not None:
            lines.append(f"     {sub['answer']}")
    return lines
