"""The thread state kept in every checkpoint: its types, reducers and constants.

Nodes and the graph both import it (`nodes/` never imports `graph/`). All values are
JSON-friendly (str, int, None, lists and dicts). Scalars are grouped in two dict-valued
channels, `thread` and `progress`, so every value passes through the checkpointer's
serializer on every backend.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from typing_extensions import TypedDict

SCHEMA_VERSION = 7
"""Version of this state layout; stored in `thread.schema_version`.

History: v1 (first release); v2 adds `thread.graph`; v3 adds `thread.workspace`,
`thread.max_tokens` and `thread.context_tokens`; v4 adds `thread.allow_writes`; v5 adds
`thread.thread_id`, binding the stored state to its thread; v6 adds
`thread.keep_checkpoints`; v7 adds `progress.partial_answer` (issue 29: a reply cut off
by the token limit). Older versions migrate on load (`graph.store.migrations`); each
version has a fixture database in `tests/fixtures/`.
"""

DEFAULT_CONTEXT_TOKENS = 16_000
"""Default context limit of a thread (estimated tokens per request)."""

DEFAULT_MAX_ATTEMPTS = 4
"""Default maximum model requests of a thread (attempts), fixed when it is created."""

DEFAULT_KEEP_CHECKPOINTS = 10
"""Default number of checkpoints a thread keeps (`--keep-checkpoints`); older ones are trimmed.

A step writes about three checkpoints (tools, budget, reason), so 10 keep the last three
steps for `graph.history` and LangGraph's time travel; the attempt log keeps every step.
"""

Status = Literal["ready", "done", "exhausted", "awaiting_approval", "cancelled"]
"""A thread's status. `ready` can continue; `done`, `exhausted` and `cancelled` are final."""

STATUSES: tuple[Status, ...] = get_args(Status)
"""Every thread status, in the order of `Status`."""

FINAL_STATUSES: tuple[Status, ...] = ("done", "exhausted", "cancelled")
"""Statuses after which a thread never counts or sends again."""

Message = dict[str, Any]
"""One OpenAI wire message: `role`, `content`, and `tool_calls` or `tool_call_id`."""

REPLACE = "__replace__"
"""A `messages` update `{REPLACE: [...]}` replaces the stored list (compaction)."""

EDIT = "__edit__"
"""A `messages` update `{EDIT: [piece, ...]}` rebuilds the stored list from pieces:
`[start, stop]` keeps that slice of the stored list, a message is put in as it is.
The reason node stores compaction this way, so a step stores only what changed, not
the whole conversation a second time beside its checkpoint."""


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
    keep_checkpoints: int | None
    """How many of its latest checkpoints the thread keeps (older ones are deleted after
    each step), or None to keep them all (`--keep-checkpoints all`)."""


class Usage(TypedDict):
    """Token counts reported by the model service (tokens): one reply's, or a thread's total."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Progress(TypedDict, total=False):
    """Where the thread is; merged key by key (see `merge_progress`).

    A node's `progress` update holds only the keys it changes.
    """

    status: Status
    """One of `STATUSES`."""
    attempts: int
    """Mirror of the ledger's count when last written; the ledger decides."""
    outcome: str | None
    """Result of the latest reason run: `tool_calls`, `answer`, `truncated` (the reply was cut
    off by the token limit, `finish_reason` `length`: no answer; the next step asks the
    model to continue), `error`, `not_sent`."""
    answer: str | None
    """The final answer once `status` is `done` (with the parts of the replies cut off before
    it that the model continued, joined in order)."""
    partial_answer: str | None
    """The text so far of a reply cut off by the token limit (`finish_reason` `length`),
    parts joined in order, while no reply has finished it; None otherwise. A thread that
    ends in its budget status with it set ended with a partial answer, never `done`."""
    stop_reason: str | None
    """Why the thread stopped without an answer (`budget`, `token_cap`, `context_limit`, or a
    model error no rerun can fix: `nodes.errors.StopReason`, `content_filter` included),
    else None."""
    last_error: dict[str, Any] | None
    """The latest failed request: `attempt`, `error_code`, `message`; None after a success."""
    usage: Usage


def append_messages(left: list[Message], right: Any) -> list[Message]:
    """Reducer for `messages`: appends new wire messages, keeping order and ids.

    An update `{REPLACE: [...]}` replaces the whole list instead, and `{EDIT: [...]}`
    rebuilds it from slices of the stored list and new messages: the reason node
    stores the compacted conversation so stored state stays bounded.

    New messages must be dicts with a text `role`: an update in another shape (LangGraph's
    `{"type": "human"}` messages, `["user", "..."]` pairs, a bare string, which would be
    split into characters) fails `update_state` and is not stored. The full check of
    roles and pairing is `graph.checkpoints.integrity.check_messages`, run on load.

    Raises:
        ValueError: An `EDIT` piece names a slice the stored list does not have; a new
            message is not a dict with a text `role`.
    """
    if isinstance(right, dict) and set(right) == {REPLACE}:
        return _wire(right[REPLACE])
    if isinstance(right, dict) and set(right) == {EDIT}:
        return _edited(left, right[EDIT])
    return [*left, *_wire(right)]


def _wire(messages: Any) -> list[Message]:
    """`messages` as a list, if it is a list of dicts with a text `role`."""
    if not isinstance(messages, list):
        raise ValueError(f"messages must be a list of OpenAI wire dicts, not "
                         f"{type(messages).__name__}")
    for index, msg in enumerate(messages):
        if not (isinstance(msg, dict) and isinstance(msg.get("role"), str)):
            raise ValueError(f"message {index} is not an OpenAI wire dict with a role "
                             f"(e.g. {{'role': 'user', 'content': '...'}}): {msg!r:.80}")
        if msg["role"] == "system":  # INVARIANTS I5: the one system message lives in code
            raise ValueError(f"message {index} has the system role: stored state never holds "
                             "one (the system instructions live in code)")
    return list(messages)


def _edited(left: list[Message], pieces: list[Any]) -> list[Message]:
    """`left` rebuilt from `pieces` (see `EDIT`)."""
    out: list[Message] = []
    for piece in pieces:
        if isinstance(piece, list):
            start, stop = piece if len(piece) == 2 else (None, None)
            if not (type(start) is int and type(stop) is int and 0 <= start < stop <= len(left)):
                raise ValueError(f"an edit keeps messages {piece!r} of {len(left)}")
            out.extend(left[start:stop])
        else:
            out.append(piece)
    return out


def merge_progress(left: Progress, right: Progress) -> Progress:
    """Reducer for `progress`: a node's keys replace the stored ones, others stay."""
    return {**left, **right}


class ThreadState(TypedDict):
    """A thread's state as stored in each checkpoint."""

    thread: ThreadInfo
    """Identity and limits, fixed at creation."""
    messages: Annotated[list[Message], append_messages]
    """The conversation as OpenAI wire dicts (`user`, `assistant`, `tool`); never `system`."""
    progress: Annotated[Progress, merge_progress]
    """Status, attempts, answer, errors and token usage."""


class ThreadUpdate(TypedDict, total=False):
    """What a node returns: only the channels it changes."""

    messages: list[Message] | dict[str, list[Any]]
    """Messages to append, `{REPLACE: [...]}` to replace the stored list, or `{EDIT: [...]}`."""
    progress: Progress
    """Progress keys to change (see `merge_progress`)."""
