"""The runtime context a node receives, typed by small protocols.

`graph/` supplies the concrete objects (the SQLite or PostgreSQL ledger, the MandAPI
client or the offline demo model); tests supply fakes. Nodes read nothing else: no
environment variables, no globals. A node reads its context through `NodeContext`:
`StepContext` holds the objects themselves (the command line, tests); a context with
plain, describable fields that resolves them (`graph.studio.StudioContext`, for
LangGraph Studio) provides the same attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from nodes.request import PreparedRequests
from nodes.state import Usage


@dataclass(frozen=True)
class LedgerEntry:
    """One thread's row of the attempt ledger.

    Attributes:
        attempts: Attempts counted so far (never decreases).
        claimed: Attempts whose request was allowed to leave the process; always
            `claimed <= attempts`. `attempts - claimed` is 0 or 1: a counted attempt
            whose request was never sent (a crash between counting and claiming).
        max_attempts: The thread's fixed maximum, set when the thread was created.
    """

    attempts: int
    claimed: int
    max_attempts: int

    @property
    def unclaimed(self) -> bool:
        """True when one counted attempt has not been sent yet and may be used."""
        return self.attempts > self.claimed

    @property
    def spent(self) -> bool:
        """True when no attempt is left: every allowed attempt was counted and claimed."""
        return not self.unclaimed and self.attempts >= self.max_attempts


class AttemptLedger(Protocol):
    """Durable per-thread attempt counter.

    A claim commits before it returns; a count may be committed later, with its node's
    checkpoint, but never after the claim that follows it.
    """

    def count(self, thread_id: str) -> LedgerEntry:
        """Makes one attempt available to send.

        Reuses the counted-but-unclaimed attempt if there is one, otherwise counts a
        new attempt if the maximum allows it. Never lowers the count.

        Returns:
            The entry after the call; `entry.spent` is True when nothing is available.
        """
        ...

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Claims counted attempt number `attempt` (1-based) for sending.

        `charge` names a shared request cap (a batch's or a parent task's) charged in the
        same transaction.

        Returns:
            True exactly once per attempt number; False if it was already claimed,
            was never counted, is not the next one (a replayed or forked state), or the
            cap is full (the attempt then stays counted and unclaimed, for later).
        """
        ...


class AttemptLog(Protocol):
    """Append-only record of what each attempt produced.

    A row is committed with its node's checkpoint at the latest (or when the step ends).
    """

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """Appends one row: `kind` is `reason` (an attempt's outcome) or `tool` (a tool result)."""
        ...

    def used_tokens(self, thread_id: str) -> int:
        """The tokens the thread's recorded attempts used (`usage.total_tokens` summed).

        Durable: a fork from an older checkpoint lowers the state's total, never this.
        """
        ...


class NoAttemptLog:
    """An attempt log that keeps nothing (for graphs run without a database log)."""

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """Does nothing."""

    def used_tokens(self, thread_id: str) -> int:
        """0: nothing is kept."""
        return 0


@dataclass(frozen=True)
class ModelReply:
    """What one chat-completions request produced.

    Attributes:
        message: The assistant message in OpenAI wire form: `role`, `content`
            (str or None) and, when the model asks for tools, `tool_calls`.
        usage: Token counts reported for this request (zeros when not reported).
        finish_reason: `choices[0].finish_reason` as the server sent it (`stop`,
            `tool_calls`, `length`, `content_filter`, `eos`, ...), or None when it was
            missing, `null` or not storable text: unknown, decided by the content
            (`nodes.replies.finish_kind`). Kept in the attempt log, never in a message.
    """

    message: dict[str, Any]
    usage: Usage = field(
        default_factory=lambda: Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
    )
    finish_reason: str | None = None


class ChatModel(Protocol):
    """Sends one chat-completions request; never retries."""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Sends `messages` (system message first) with `tools` and returns the reply.

        Raises:
            nodes.errors.ModelRequestError: The request failed (timeout, connection,
                HTTP status, unparsable answer). The attempt stays spent.
        """
        ...


class NoModel:
    """A `ChatModel` for invocations that must never make a model request (approvals)."""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Always fails: reaching it is a bug."""
        raise RuntimeError("this invocation must not make a model request")


class NodeContext(Protocol):
    """What a node reads from its runtime context (`Runtime[NodeContext]`)."""

    @property
    def thread_id(self) -> str:
        """The thread being advanced (for the ledger)."""
        ...

    @property
    def ledger(self) -> AttemptLedger:
        """The durable attempt ledger of the thread's database."""
        ...

    @property
    def model(self) -> ChatModel:
        """The chat model serving this thread."""
        ...

    @property
    def log(self) -> AttemptLog:
        """Where each attempt's outcome and each tool result is recorded."""
        ...

    @property
    def charge(self) -> str | None:
        """A shared request cap charged with every request, or None."""
        ...

    @property
    def prepared(self) -> PreparedRequests:
        """The request the budget node prepared, for the reason node of the same invocation."""
        ...


class Lease:
    """Where and while a runtime context may be used: one `Database.invocation` block.

    A context with a lease counts attempts only in graphs compiled with `saver` (the
    database its ledger lives in) and only until its block ends and releases the
    thread's writer lock (`end`); the budget node refuses it otherwise.

    Attributes:
        saver: The checkpointer of the database that made the context.
        ledger: That database's attempt ledger (the context's own).
        thread_id: The thread whose lock the block holds.
        alive: True until the block ends.
    """

    def __init__(self, saver: object, ledger: AttemptLedger, thread_id: str) -> None:
        self.saver = saver
        self.ledger = ledger
        self.thread_id = thread_id
        self.alive = True

    def end(self) -> None:
        """Marks the block ended: every later use of the context is refused."""
        self.alive = False


@dataclass(frozen=True)
class StepContext:
    """Everything a node needs besides state, passed as LangGraph runtime context.

    Attributes:
        thread_id: The thread being advanced (for the ledger).
        ledger: The durable attempt ledger of the thread's database.
        model: The chat model serving this thread (offline demo or MandAPI).
        log: Where each attempt's outcome and each tool result is recorded.
        charge: A shared request cap charged with every request (`--max-requests` of a
            batch or a parent task), or None.
        prepared: The request the budget node prepared, for the reason node of the same
            invocation (never stored; see `nodes.request`).
        lease: Set by `Database.invocation`: which database and block the context
            belongs to (`Lease`); None for the contexts the program builds itself.
    """

    thread_id: str
    ledger: AttemptLedger
    model: ChatModel
    log: AttemptLog = field(default_factory=NoAttemptLog)
    charge: str | None = None
    prepared: PreparedRequests = field(default_factory=PreparedRequests, compare=False, repr=False)
    lease: Lease | None = field(default=None, compare=False, repr=False)
