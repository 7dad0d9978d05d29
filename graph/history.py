"""Show what a thread did, or list every thread. Reads only; never counts an attempt.

  python -m graph.history --thread ID [--db PATH_OR_URL] [--checkpoints N] [--json]
  python -m graph.history --list [--db PATH_OR_URL] [--json]

--thread of a parent task (`graph.batch --parent ID`) shows its result: the answers of
its subtasks ID:sub_0, ID:sub_1, ... in order.
Exit 0, or 4 when the thread does not exist or fails its checks, 2 for usage errors.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from graph.api import Database
from graph.cli import Parser, emit, guard, resolve_db, whole_number
from graph.outcome import REVIEW_REMINDER
from graph.settings import Settings, check_thread_id
from graph.threads.history import MAX_CHECKPOINTS_PAGE
from graph.threads.subtasks import render_parent
from nodes.write_tools import WRITE_TOOLS, WriteError, parse_write

__all__ = [
    "LIST_HEADER",
    "main",
    "render",
    "render_list",
]


def _short(text: Any, width: int) -> str:
    text = "" if text is None else " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _call(call: dict[str, Any]) -> str:
    """A tool call on one line; a write call with its path whole (never shortened away)."""
    if call["name"] in WRITE_TOOLS:
        try:
            _, path, text = parse_write({"function": {"name": call["name"],
                                                      "arguments": call["arguments"]}})
        except WriteError:
            pass
        else:
            return f"{call['name']} {path} ({len(text)} chars)"
    return _short(f"{call['name']}({call.get('canonical_arguments', call['arguments'])})", 36)


def _finish(step: dict[str, Any]) -> str:
    """A step's `finish` column: its reply's `finish_reason` as the server sent it.

    `unknown` for a reply without one (the server sent none, or the row predates schema
    v7); `-` when no reply was read (a failed request or refused reply, a step with no
    record).
    """
    if step["finish_reason"] is not None:
        return _short(step["finish_reason"], 14)
    return "-" if step["outcome"] in ("error", "no record") else "unknown"


def render(history: dict[str, Any]) -> str:
    """The text report of `graph.threads.history.thread_history`."""
    h = history["header"]
    usage = h["usage"]
    lines = [
        f"thread   {h['thread_id']}",
        f"task     {h['task']}",
        f"model    {h['model']}",
        f"status   {h['status']}" + (f" ({h['stop_reason']})" if h["stop_reason"] else ""),
        f"attempts {h['attempts']}/{h['max_attempts']}",
        f"tokens   {usage['total_tokens']} (prompt {usage['prompt_tokens']}, "
        f"completion {usage['completion_tokens']})"
        + (f" of at most {h['max_tokens']}" if h.get("max_tokens") else ""),
        *([f"workspace {h['workspace']}"] if h.get("workspace") else []),
        f"created  {h['created_at']}",
        f"updated  {h['updated_at']}",
    ]
    if h["answer"] is not None:
        lines += [f"answer   {h['answer']}", REVIEW_REMINDER]
    lines += ["", "step  outcome     finish          tokens  completed_at               "
              "thought / tool call → observation"]
    for step in history["steps"]:
        head = (f"{step['step']:>4}  {step['outcome']:<10}  {_finish(step):<14}  "
                f"{step['tokens']:>6}  {step['completed_at'] or '-':<25}  ")
        detail = step["error"] if step["outcome"] in ("error", "no record") else step["thought"]
        lines.append(head + _short(detail, 60))
        for call in step["tool_calls"]:
            lines.append(" " * (len(head) + 1) + _call(call) + " → "
                         + _short(call["observation"] or "(not run yet)", 50))
    if history.get("decisions"):
        lines += ["", "review decisions"]
        for d in history["decisions"]:
            lines.append(f"  step {d['step']}  {d['tool_call_id']}  {d['tool']} "
                         f"{d['target'] or '-'}  {d['decision']}"
                         f"{' (' + d['reason'] + ')' if d['reason'] else ''}  {d['decided_at']}  "
                         f"applied={'yes' if d['applied'] else 'no'}  sha256={d['args_sha256'][:12]}…"
                         + (f"  not applied: {d['error']}" if d["error"] else ""))
    shown, total = len(history["checkpoints"]), history.get("checkpoints_total", 0)
    lines += ["", f"checkpoints: the latest {shown} of {total} stored"
              + (" (--checkpoints N shows more)" if shown < total else ""),
              *_over_window(total, h.get("keep_checkpoints")),
              "checkpoint                              step  written_by    next      attempts"]
    for cp in history["checkpoints"]:
        attempts = "-" if cp["attempts"] is None else cp["attempts"]
        lines.append(f"{cp['checkpoint_id']:<38}  {cp['step']:>4}  {cp['written_by']:<12}  "
                     f"{','.join(cp['next']) or '-':<8}  {attempts}")
    if history.get("checkpoints_trimmed"):
        lines.append(f"older checkpoints were trimmed: this thread keeps its latest "
                     f"{h['keep_checkpoints']} (--keep-checkpoints); the step log above has "
                     "every attempt")
    if history.get("parent_result"):
        lines += ["", "subtasks of this thread", *render_parent(history["parent_result"])]
    return "\n".join(lines)


def _over_window(total: int, keep: Any) -> list[str]:
    """Why a thread holds more checkpoints than its window, when it does; else nothing.

    A fork or an `update_state` made outside a step (`Database.invocation`, Studio)
    writes checkpoints of its own branch after the latest, and nothing trims them until
    the thread's next step (`graph.run`, `graph.batch`, a queue worker) or `graph.prune`
    keeps its latest `keep` again (`graph.store.sql.window`, `graph.store.redis.backend`).
    """
    if not isinstance(keep, int) or total <= keep:
        return []
    return [f"  {total - keep} more than the {keep} this thread keeps (--keep-checkpoints): a fork "
            "or update_state made outside graph.run (written_by fork, update_state) added a "
            "branch of its own; the thread's next step or graph.prune trims it back to its "
            f"latest {keep}, the newest branch's"]


LIST_HEADER = f"{'thread':<24} {'status':<12} attempts  {'updated_at':<32} task"
"""The header line of `--list`."""


def render_list(threads: list[dict[str, Any]]) -> str:
    """The text of `--list`: a header line, then one line per thread (`list_threads`)."""
    rows = [LIST_HEADER]
    for t in threads:
        attempts = f"{t['attempts']}/{t['max_attempts']}" if t["attempts"] is not None else "-"
        rows.append(f"{t['thread_id']:<24} {t['status'] or '-':<12} {attempts:<9} "
                    f"{t['updated_at'] or '-':<32} {_short(t['task'], 50)}")
    if not threads:
        rows.append("(no threads)")
    return "\n".join(rows)


def _render_parent(data: dict[str, Any]) -> str:
    result = data["parent_result"]
    lines = render_parent(result)
    if result.get("review_required"):
        lines.append(REVIEW_REMINDER)
    return "\n".join(lines)


def _page(text: str) -> int:
    value = whole_number(text)
    if not 1 <= value <= MAX_CHECKPOINTS_PAGE:
        raise ValueError(text)
    return value


_page.__name__ = "page size (1 to 10000)"


def main(argv: list[str] | None = None) -> int:
    """Prints one thread's history or the thread list; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser("python -m graph.history", __doc__)
    parser.add_db()
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", help="the thread to show")
    which.add_argument("--list", action="store_true", help="list every thread")
    parser.add_argument("--checkpoints", type=_page, metavar="N",
                        help="show the latest N checkpoints of --thread (1 to 10000, default 50)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    as_json = "--json" in argv

    def body() -> int:
        args = parser.parse_args(argv)

        if args.thread is not None:
            check_thread_id(args.thread)
        elif args.checkpoints is not None:
            parser.error("--checkpoints pages one thread's checkpoints: use it with --thread")
        with Database(Settings(db=resolve_db(args.db)), read_only=True, source="flags") as db:
            if args.list:
                data: Any = {"threads": db.threads()}
                text = render_list(data["threads"])
            else:
                data = db.history(args.thread, args.checkpoints or 50)
                text = render(data) if "header" in data else _render_parent(data)
        emit(json.dumps(data, ensure_ascii=False, indent=2) if as_json else text)
        return 0

    return guard(body, as_json)

if __name__ == "__main__":
    sys.exit(main())
