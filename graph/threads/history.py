"""Reading what a thread did: header, step log and checkpoint list. Never writes.

The functions behind `python -m graph.history` and the notebook. They open nothing
themselves: pass a store opened with `read_only=True`.
"""

from __future__ import annotations

from typing import Any

from graph.checkpoints.load import (
    check_stored_thread,
    check_values,
    graph_of,
    history_page,
    load_thread,
    pending_input,
    pending_review,
    read_snapshot,
)
from graph.errors import ErrorCode, RefusedError
from graph.store.base import Store
from graph.threads.subtasks import stored_parent_result
from nodes.write_tools import canonical_arguments

__all__ = ["MAX_CHECKPOINTS_PAGE", "list_threads", "step_log", "thread_history", "thread_or_parent"]

MAX_CHECKPOINTS_PAGE = 10_000
"""The most checkpoints one history page lists (`graph.history --checkpoints`, `Database.history`)."""
OBSERVATION_PREVIEW_CHARS = 80


def _writer(snapshot: Any, parent: Any | None) -> str:
    source = snapshot.metadata.get("source") if snapshot.metadata else None
    if source == "input":
        return "input"
    if source == "update":
        return "update_state"
    if parent is not None and parent.next:
        return ",".join(parent.next)
    return "?" if source == "loop" else source or "?"  # its parent was trimmed


def step_log(store: Store, thread_id: str) -> list[dict[str, Any]]:
    """One row per model attempt, oldest first, from the append-only attempt log.

    Returns:
        Dicts with `step` (attempt number), `outcome` (`tool_calls`, `answer`, `error`,
        or `no record` for a claimed attempt whose process stopped before recording),
        `thought` (assistant text or None), `tool_calls` (each with `id`, `name`,
        `arguments` as sent by the model, `canonical_arguments` (what the tool used
        and a review showed; the raw text when ambiguous) and its whole
        `observation`, None if the tool has not run),
        `tokens` (total tokens of the request), `finish_reason`, `error_code`, `error`
        and `completed_at` (UTC, ISO 8601). `finish_reason` is the reply's
        `choices[0].finish_reason` as its row logged it (`stop`, `length`,
        `content_filter`, `eos`, ...; issue 29), or None when unknown: the server sent
        none, no reply was read (a failed request, a refused reply), or the row was
        logged before schema v7 kept it.
    """
    steps: dict[int, dict[str, Any]] = {}
    observations: dict[tuple[int, str], str] = {}  # by (attempt, call id): ids recur per turn
    for row in store.log.rows(thread_id):
        payload = row["payload"]
        if row["kind"] == "tool":
            observations.setdefault((row["attempt"], payload["tool_call_id"]),
                                    payload["observation"])
            continue
        steps.setdefault(row["attempt"], {
            "step": row["attempt"], "outcome": payload["outcome"],
            "thought": payload.get("thought"),
            "tool_calls": [dict(c) for c in payload.get("tool_calls", [])],
            "tokens": (payload.get("usage") or {}).get("total_tokens", 0),
            "finish_reason": payload.get("finish_reason"),
            "error_code": payload.get("error_code"), "error": payload.get("message"),
            "completed_at": row["created_at"]})
    entry = store.ledger.read(thread_id)
    for attempt in range(1, (entry.claimed if entry else 0) + 1):
        steps.setdefault(attempt, {
            "step": attempt, "outcome": "no record", "thought": None, "tool_calls": [],
            "tokens": 0, "finish_reason": None, "error_code": None,
            "error": "the process stopped during this attempt; it is counted as spent",
            "completed_at": None})
    for step in steps.values():
        for call in step["tool_calls"]:
            call["observation"] = observations.get((step["step"], call["id"]))
            call["canonical_arguments"] = canonical_arguments(call.get("arguments"))
    return [steps[k] for k in sorted(steps)]


def checkpoints(store: Store, thread_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """The thread's latest `limit` checkpoints, oldest first (`checkpoint_page`'s rows)."""
    return checkpoint_page(store, thread_id, limit)[0]


def checkpoint_page(store: Store, thread_id: str, limit: int = 50
                    ) -> tuple[list[dict[str, Any]], bool]:
    """The thread's latest `limit` checkpoints, oldest first, and whether older ones were trimmed.

    One page through LangGraph's `get_state_history(limit=...)`, so a long history is
    never read whole. A thread keeps only its latest `keep_checkpoints` checkpoints
    (`graph.store.sql.window`): the oldest one it kept has no parent, so its
    `written_by` is `?`; the attempt log (`step_log`) still has every step.

    Returns:
        Dicts with `checkpoint_id`, `step`, `written_by` (node, `input`, `update_state`,
        or `?` when the checkpoint before it was trimmed), `next` (list of node names),
        `attempts` (mirrored count at that point, None before the input is applied) and
        `created_at`; and True when the page reaches the oldest stored checkpoint and it
        is not the thread's first (its input): older ones were trimmed.

    Raises:
        RefusedError: A checkpoint in the page fails its checks (`damaged`, ...).
    """
    graph = graph_of(store)
    config = {"configurable": {"thread_id": thread_id}}
    where = f"{store.location}: thread {thread_id!r}"
    page = history_page(graph, config, where, limit + 1)
    rows = []
    for index, snapshot in enumerate(page[:limit]):
        parent = page[index + 1] if index + 1 < len(page) else None
        values = snapshot.values
        if tuple(snapshot.next) == ("__start__",):
            values = pending_input(graph, snapshot.config, where)
        attempts = None
        if values.get("thread"):
            checked, _ = check_values(values, tuple(snapshot.next), store.location, thread_id,
                                      checkpoint_id=snapshot.config["configurable"]["checkpoint_id"])
            attempts = checked["progress"]["attempts"]
        rows.append({"checkpoint_id": snapshot.config["configurable"]["checkpoint_id"],
                     "step": snapshot.metadata.get("step"), "written_by": _writer(snapshot, parent),
                     "next": list(snapshot.next), "attempts": attempts,
                     "created_at": snapshot.created_at})
    trimmed = bool(page) and len(page) <= limit and page[-1].metadata.get("step") != -1
    return list(reversed(rows)), trimmed


def thread_history(store: Store, thread_id: str, checkpoint_limit: int = 50) -> dict[str, Any]:
    """Everything `graph.history` shows about one thread.

    Returns:
        `{"header": {...}, "steps": step_log(...), "checkpoints": checkpoints(...),
        "checkpoints_total": int (how many the thread has stored, shown or not),
        "checkpoints_trimmed": bool (`checkpoint_page`), "decisions": [...]}` (decisions on
        write calls: `step` (the attempt whose reply asked for the call), `tool_call_id`,
        `tool`, `target` (the path, whole), `arguments` (the canonical text approved; None on
        rows from before it was kept), `args_sha256`, `decision`, `reason`, `decided_at`,
        `applied`, `error` (why an approved write was not applied) and `result`); the header has
        `thread_id`, `task`, `model`, `status`, `attempts` (the ledger's count), `max_attempts`,
        `usage` (tokens summed over the whole attempt log: `graph.store.base.Store.figures`),
        `max_tokens`, `context_tokens`, `keep_checkpoints` (a number, or `all`), `workspace`,
        `created_at`, `updated_at`, `answer`, `stop_reason`, `review_required` and
        `pending_calls` (the write calls waiting for review, as `graph.run` shows them,
        while `status` is `awaiting_approval`; else None).

    Raises:
        RefusedError: `no_such_thread`, or the thread fails its checks.
    """
    graph = graph_of(store)
    # Every check run and verify make (the ledger against the checkpoint, the log, older
    # checkpoints): history showed a thread run and verify refuse, exit 0.
    loaded = check_stored_thread(store, graph, thread_id)
    if loaded is None:
        raise RefusedError(f"no such thread {thread_id!r} in {store.location}",
                           error_code=ErrorCode.NO_SUCH_THREAD)
    thread, progress = loaded.values["thread"], loaded.values["progress"]
    figures = store.figures(thread_id)  # what `graph.run` and every other face shows
    pending = pending_review(loaded.snapshot)
    header = {
        "thread_id": thread_id, "task": thread["task"], "model": thread["model"],
        "status": _status(loaded.values, pending), "pending_calls": pending,
        "attempts": figures.attempts,
        "max_attempts": thread["max_attempts"], "usage": figures.usage,
        "max_tokens": thread["max_tokens"], "context_tokens": thread["context_tokens"],
        "keep_checkpoints": thread["keep_checkpoints"] or "all",
        "workspace": thread["workspace"],
        "created_at": thread["created_at"],
        "updated_at": _updated_at(store, graph, thread_id),
        "answer": progress["answer"], "stop_reason": progress["stop_reason"],
        "review_required": progress["answer"] is not None,
    }
    decisions = [{"step": r["attempt"], "tool_call_id": r["tool_call_id"], "tool": r["tool"],
                  "target": r["target"], "arguments": r["arguments"],
                  "args_sha256": r["args_sha256"], "decision": r["decision"], "reason": r["reason"],
                  "decided_at": r["decided_at"], "applied": r["applied_at"] is not None
                  and r["decision"] == "approve", "error": r["error"], "result": r["result"]}
                 for r in store.approvals.rows(thread_id).values()]
    page, trimmed = checkpoint_page(store, thread_id, checkpoint_limit)
    return {"header": header, "steps": step_log(store, thread_id), "checkpoints": page,
            "checkpoints_total": max(store.count_checkpoints(thread_id), len(page)),
            "checkpoints_trimmed": trimmed, "decisions": decisions}


def thread_or_parent(store: Store, thread_id: str, checkpoint_limit: int = 50) -> dict[str, Any]:
    """`thread_history`, with `parent_result` when the thread is also a parent task.

    A parent that is no thread itself (`graph.batch --parent ID` only creates its
    subtasks) gives `{"parent_result": ...}` alone (`graph.threads.subtasks.stored_parent_result`).

    Raises:
        RefusedError: `no_such_thread` when `thread_id` is neither a thread nor a parent;
            the thread fails its checks.
    """
    parent = stored_parent_result(store, thread_id)
    try:
        history = thread_history(store, thread_id, checkpoint_limit)
    except RefusedError as exc:
        if parent is None or exc.error_code != ErrorCode.NO_SUCH_THREAD:
            raise
        return {"parent_result": parent}
    return {**history, "parent_result": parent}


def _status(values: dict[str, Any], pending: list[dict[str, Any]] | None) -> str:
    """The status `graph.run` reports: `awaiting_approval` while write calls wait for review.

    The stored status of such a thread is `ready` (the graph is paused in the tools
    node); a fresh user read that in history and thought it needed only another run.
    """
    return "awaiting_approval" if pending else str(values["progress"]["status"])


def _updated_at(store: Store, graph: Any, thread_id: str) -> str:
    """The thread's `updated_at` as `list_threads` shows it.

    The ledger's time of its last attempt or status change; the latest checkpoint's time
    for a thread without a ledger row. A fresh user saw two times for one thread (the
    header used the checkpoint's, the list the ledger's, a few milliseconds apart).
    """
    row = store.ledger.row(thread_id)
    if row is not None:
        return row.updated_at
    return str(read_snapshot(graph, {"configurable": {"thread_id": thread_id}},
                             store.location).created_at)


def list_threads(store: Store) -> list[dict[str, Any]]:
    """Every thread in the database, by thread id.

    Returns:
        Dicts with `thread_id`, `status` (or `unreadable: <error_code>`), `attempts`,
        `max_attempts`, `updated_at` (ledger time of the last attempt or status change)
        and `task` (whole; shorten for display).
    """
    graph = graph_of(store)
    rows = []
    updated = store.ledger.updated_at()
    # Checkpoints without a ledger row are listed too (as damaged), never hidden.
    ids = set(updated) | (set(store.thread_ids()) - store.tombstones.thread_ids())
    for thread_id in sorted(ids):
        row: dict[str, Any] = {"thread_id": thread_id, "attempts": None, "max_attempts": None,
                               "updated_at": updated.get(thread_id), "status": None, "task": None}
        if thread_id not in updated:
            row["status"] = f"unreadable: {ErrorCode.DAMAGED}"
            rows.append(row)
            continue
        try:
            entry = store.ledger.read(thread_id)
            if entry is not None:  # None: pruned by another process just now
                row.update(attempts=entry.attempts, max_attempts=entry.max_attempts)
            loaded = load_thread(graph, thread_id, store.location)
        except RefusedError as exc:
            row["status"] = f"unreadable: {exc.error_code}"
        else:
            if loaded is not None:
                row["status"] = _status(loaded.values, pending_review(loaded.snapshot))
                row["task"] = loaded.values["thread"]["task"]
        rows.append(row)
    return rows
