"""The thread state kept in every checkpoint.

All values are JSON-friendly (str, int, None, lists and dicts). Scalars are grouped in
two dict-valued channels, `thread` and `progress`, so every value passes through the
checkpointer's serializer on every backend.
"""

from __future__ import annotations

from typing import Annotated, Any

from typing_extensions import TypedDict

SCHEMA_VERSION = 5
"""Version of this state layout; stored in `thread.schema_version`.

History: v1 (first release); v2 adds `thread.graph`; v3 adds `thread.workspace`,
`thread.max_tokens` and `thread.context_tokens`; v4 adds `thread.allow_writes`; v5 adds
`thread.thread_id`, binding the stored state to its thread. Older versions migrate on load
(`graph.migrations`); each version has a fixture database in `tests/fixtures/`.
"""

DEFAULT_CONTEXT_TOKENS = 16_000
"""Default context limit of a thread (estimated tokens per request)."""

STATUSES = ("ready", "done", "exhausted", "awaiting_approval", "cancelled")
"""Every thread status. `ready` can continue; `done`, `exhausted` and `cancelled` are final."""

FINAL_STATUSES = ("done", "exhausted", "cancelled")


class ThreadInfo(TypedDict):
    """Identity, fixed when the thread is created (INVARIANTS I7)."""

    schema_version: int
    """Layout version of this state (`SCHEMA_VERSION` when written)."""
    thread_id: str
    """The thread this state belongs to; a state found under another id is refused."""
    task: str
    """The task text, exactly as given with `--task`."""
    model: str
    """Model id: `offline-demo` or a MandAPI model id."""
    max_attempts: int
    """Maximum model requests for the thread (attempts)."""
    created_at: str
    """Creation time, UTC, ISO 8601."""
    graph: str
    """Signature of the node and tool set that created the thread (`graph_signature`)."""
    workspace: str | None
    """Absolute path of the read-only workspace folder, or None (reference tools only)."""
    max_tokens: int | None
    """Cap on the total tokens reported by the API for the thread (tokens), or None."""
    context_tokens: int
    """Context limit per request (estimated tokens); older material is compacted."""
    allow_writes: str | None
    """Absolute path of the folder write tools may change after approval, or None."""


class Usage(TypedDict):
    """Token totals reported by the model service over the thread (tokens)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Progress(TypedDict, total=False):
    """Where the thread is; merged key by key (see `merge_progress`)."""

    status: str
    """One of `STATUSES`."""
    attempts: int
    """Mirror of the ledger's count when last written; the ledger decides."""
    outcome: str | None
    """Result of the latest reason run: `tool_calls`, `answer`, `error`, `not_sent`."""
    answer: str | None
    """The final answer once `status` is `done`."""
    stop_reason: str | None
    """Why the thread stopped without an answer (`budget`), else None."""
    last_error: dict[str, Any] | None
    """The latest failed request: `attempt`, `error_code`, `message`; None after a success."""
    usage: Usage


REPLACE = "__replace__"
"""A `messages` update `{REPLACE: [...]}` replaces the stored list (compaction)."""


def append_messages(left: list[dict[str, Any]], right: Any) -> list[dict[str, Any]]:
    """Reducer for `messages`: appends new wire messages, keeping order and ids.

    An update `{"__replace__": [...]}` replaces the whole list instead: the reason node
    stores the compacted conversation so stored state stays bounded.
    """
    if isinstance(right, dict) and set(right) == {REPLACE}:
        return list(right[REPLACE])
    return [*left, *right]


def merge_progress(left: Progress, right: Progress) -> Progress:
    """Reducer for `progress`: a node's keys replace the stored ones, others stay."""
    return {**left, **right}  # type: ignore[typeddict-item]


class ThreadState(TypedDict):
    """A thread's state as stored in each checkpoint."""

    thread: ThreadInfo
    """Identity and limits, fixed at creation."""
    messages: Annotated[list[dict[str, Any]], append_messages]
    """The conversation as OpenAI wire dicts (`user`, `assistant`, `tool`); never `system`."""
    progress: Annotated[Progress, merge_progress]
    """Status, attempts, answer, errors and token usage."""


def graph_signature(with_workspace: bool = False, with_writes: bool = False) -> str:
    """The node and tool set of this program's graph, as stored in `thread.graph`.

    A thread whose stored signature differs was written by a graph this program cannot
    continue (unless a migration maps it), and is refused as `incompatible`.
    """
    from nodes.tools import tool_specs

    tools = sorted(spec["function"]["name"] for spec in tool_specs(with_workspace, with_writes))
    return f"nodes=budget,reason,tools;tools={','.join(tools)}"


def initial_state(*, thread_id: str, task: str, model: str, max_attempts: int, created_at: str,
                  workspace: str | None = None, max_tokens: int | None = None,
                  context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                  allow_writes: str | None = None) -> ThreadState:
    """Returns the input that creates a thread: its identity and the task as a user message."""
    return ThreadState(
        thread=ThreadInfo(
            schema_version=SCHEMA_VERSION,
            thread_id=thread_id,
            task=task,
            model=model,
            max_attempts=max_attempts,
            created_at=created_at,
            graph=graph_signature(workspace is not None, allow_writes is not None),
            workspace=workspace,
            max_tokens=max_tokens,
            context_tokens=context_tokens,
            allow_writes=allow_writes,
        ),
        messages=[{"role": "user", "content": task}],
        progress=Progress(
            status="ready",
            attempts=0,
            outcome=None,
            answer=None,
            stop_reason=None,
            last_error=None,
            usage=Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
        ),
    )
