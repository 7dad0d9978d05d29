"""The one way stored data is upgraded: versioned steps for state, tables and the value format.

Three kinds of stored data have versions, each registered here with its current version
(`CURRENT`) and one `Step` per version, from 1 up to the current one (`STEPS`):

* `state`: a checkpoint's state values, versioned by `thread.schema_version`
  (`nodes.state.SCHEMA_VERSION`); a step is a pure function of the values and the thread
  id they are read under.
* `table`: our tables (`graph.store.sql.schema`), each versioned by its shape (no version
  number was ever stored: `VersionedTable.stored_version` recognises it); a step is a
  pure function of one row (and what `Lookups` reads elsewhere in the store). Every table
  not named in `CURRENT` is at version 1 and has no step.
* `value`: the format of each stored value (`graph.store.serde.MAGIC`, format 1); no step yet.

The rule, the same for every kind (INVARIANTS I4):

1. **Reading upgrades in memory and never writes.** Whoever reads stored data (a load,
   `graph.history`, `graph.verify`, a read-only store) gets it in the current version
   through these steps; the stored bytes are left as they are.
2. **Only a writer writes back, right before its own write of that data, atomically.**
   A command that is about to change stored data first writes that data back in the
   current version, as one unit of its own: a crash leaves the old version whole or the
   new one whole, and the command's own write then goes to current data. Where:

   * a table: before this store's first write to it (`upgrade_table`), in one
     transaction serialized between processes (`TABLE_UPGRADE_LOCK`), every row at once;
   * a thread's state: before a step invokes the model (`graph.step.advance`), as one
     checkpoint holding the channels the steps changed (`state_write_back`), written
     as the node before would have (so the next node is the same). Not where a new
     checkpoint would change what runs next: a thread at `__start__` (its input is
     pending writes) or paused for review (its interrupt), nor by a finished thread's
     report, `update_state`, cancel or copy, which carry the stored channels over
     unchanged; the next model step writes it back;
   * a value: with the write of the value (no step yet).

   Older checkpoints of a thread stay as written: history upgrades them when it reads them.
3. **A version newer than `CURRENT`, one that is not a positive integer, or one with no
   step is refused** as `incompatible` (exit 4), never defaulted, and nothing is written.

Adding a step (a later issue): raise the subject's version in `CURRENT` (for state,
`SCHEMA_VERSION`), add its `Step` to `STEPS`, and keep a fixture of the old version
(state: a `tests/fixtures/vN.sqlite` from `tests/fixtures/build_fixtures.py`; a table:
its old DDL in `TABLE_FIXTURES` of `tests/store/test_migrations.py`). A table's backend
gives it as a `VersionedTable`; on Redis its `rebuild` must be one atomic unit too (one
`WATCH`/`MULTI` transaction or Lua script, as `graph.store.redis.approvals` updates rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

from graph.errors import ErrorCode, RefusedError
from nodes.state import DEFAULT_CONTEXT_TOKENS, DEFAULT_KEEP_CHECKPOINTS, SCHEMA_VERSION
from nodes.write_results import legacy_error

__all__ = [
    "CURRENT", "STATE", "STEPS", "TABLE_UPGRADE_LOCK", "V1_GRAPH", "VALUE_FORMAT", "Kind",
    "Lookups", "MigrationDb", "Step", "VersionedTable", "current_version", "migrate_rows",
    "migrate_state", "read_table", "state_write_back", "steps_from", "upgrade_table",
]

Kind = Literal["state", "table", "value"]
"""What a step upgrades: a checkpoint's state values, a table of ours, a stored value's format."""

STATE = "state"
"""The subject of the `state` kind (there is one state layout)."""
VALUE_FORMAT = "value format"
"""The subject of the `value` kind (`graph.store.serde`: magic, checksum, msgpack)."""

V1_GRAPH = "nodes=budget,reason,tools;tools=get_reference,list_references,search_references"
"""The node and tool set of every schema v1 thread (v1 stored no signature)."""

TABLE_UPGRADE_LOCK = 0x6D72_6170
"""PostgreSQL advisory lock key ("mrap") every table upgrade holds for its transaction.

The key the `write_approvals` upgrade has always held, so a process of an older
release upgrading the same table waits for this one, and the other way round."""


@dataclass(frozen=True)
class Step:
    """One upgrade of one subject from `from_version` to `to_version` (= `from_version` + 1).

    Attributes:
        kind: What it upgrades.
        subject: `STATE`, a table's name or `VALUE_FORMAT`.
        from_version: The version it reads.
        to_version: The version it gives.
        upgrade: A pure function, never changing its input: for `state`
            `(values, thread_id) -> values`; for `table` `(row, lookups) -> row` with
            `lookups` a `Lookups`; for `value` `(value, None) -> value`.
        writes: For `state`, the channels `upgrade` changes (what `state_write_back`
            writes); empty for the other kinds (a table is rewritten whole).
    """

    kind: Kind
    subject: str
    from_version: int
    to_version: int
    upgrade: Callable[[dict[str, Any], Any], dict[str, Any]]
    writes: tuple[str, ...] = ()


class Lookups(Protocol):
    """What a table step may read elsewhere in the store, given by the table's backend."""

    def reply_turn(self, thread_id: str, tool_call_id: str) -> int | None:
        """The attempt whose reply carried `tool_call_id` (attempt log), or None when unknown."""


class MigrationDb(Protocol):
    """The database a table upgrade runs on (`graph.store.sql.conn.Sql`)."""

    def transaction(self) -> AbstractContextManager[None]:
        """One transaction; rolls back on any error."""

    def serialize_migration(self, key: int) -> None:
        """Inside a transaction: waits until no other process migrates (lock `key`)."""


class VersionedTable(Protocol):
    """A table of ours as its backend gives it to `upgrade_table` and `migrate_rows`."""

    @property
    def name(self) -> str:
        """The table's name (a `subject` of `table` steps)."""

    def stored_version(self) -> int | None:
        """The version of the table's shape as stored, or None when the table does not exist."""

    def stored_rows(self, version: int, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Every row (of `thread_id`, or all) as stored at `version`, type-checked.

        Raises:
            RefusedError: `damaged` for a row that fails its checks.
        """

    def rebuild(self, rows: list[dict[str, Any]]) -> None:
        """Replaces the table by its current shape holding `rows` (inside the caller's transaction)."""

    def lookups(self) -> Lookups:
        """What the table's steps may read, for one upgrade or one read."""


# ---- state steps: thread.schema_version ------------------------------------------------

def _state_v1_to_v2(values: dict[str, Any], _thread_id: str) -> dict[str, Any]:
    """v2 stores the graph signature; every v1 thread ran the v1 graph."""
    return {**values, "thread": {**values["thread"], "schema_version": 2, "graph": V1_GRAPH}}


def _state_v2_to_v3(values: dict[str, Any], _thread_id: str) -> dict[str, Any]:
    """v3 stores the workspace and the token limits; v2 threads had none of them."""
    return {**values, "thread": {**values["thread"], "schema_version": 3, "workspace": None,
                                 "max_tokens": None, "context_tokens": DEFAULT_CONTEXT_TOKENS}}


def _state_v3_to_v4(values: dict[str, Any], _thread_id: str) -> dict[str, Any]:
    """v4 stores the writable folder; v3 threads had no write tools."""
    return {**values, "thread": {**values["thread"], "schema_version": 4, "allow_writes": None}}


def _state_v4_to_v5(values: dict[str, Any], thread_id: str) -> dict[str, Any]:
    """v5 stores the thread id; a v4 thread takes the id it is read under."""
    return {**values, "thread": {**values["thread"], "schema_version": 5, "thread_id": thread_id}}


def _state_v5_to_v6(values: dict[str, Any], _thread_id: str) -> dict[str, Any]:
    """v6 stores the checkpoint window; a v5 thread gets the default, so it is trimmed too."""
    return {**values, "thread": {**values["thread"], "schema_version": 6,
                                 "keep_checkpoints": DEFAULT_KEEP_CHECKPOINTS}}


def _state_v6_to_v7(values: dict[str, Any], _thread_id: str) -> dict[str, Any]:
    """v7 keeps the text of a reply cut off by the token limit; no v6 thread had one.

    Progress that is not a dict is left as it is, for the state check to refuse (`damaged`).
    """
    progress = values.get("progress")
    if isinstance(progress, dict):
        progress = {**progress, "partial_answer": None}
    return {**values, "thread": {**values["thread"], "schema_version": 7}, "progress": progress}


# ---- table steps ------------------------------------------------------------------------

def _approvals_v1_to_v2(row: dict[str, Any], lookups: Lookups) -> dict[str, Any]:
    """v2 keys a decision by its turn (`PRIMARY KEY (thread_id, attempt, tool_call_id)`).

    A v1 row (keyed by thread and call id: ids were unique in a thread then) gets the
    attempt whose reply carried its call id, or 0 when the attempt log does not know (a
    row that then answers no turn and stays visible in history); `arguments` None (not
    kept then); `error` the result text of an approved write that was not applied
    (`nodes.write_results.legacy_error`), whose `applied_at` is then None.
    """
    failed = legacy_error(row["decision"], row["result"]) is not None
    attempt = lookups.reply_turn(row["thread_id"], row["tool_call_id"])
    return {**row, "attempt": 0 if attempt is None else attempt, "arguments": None,
            "error": row["result"] if failed else None,
            "applied_at": None if failed else row["applied_at"]}


STEPS: tuple[Step, ...] = (
    Step("state", STATE, 1, 2, _state_v1_to_v2, writes=("thread",)),
    Step("state", STATE, 2, 3, _state_v2_to_v3, writes=("thread",)),
    Step("state", STATE, 3, 4, _state_v3_to_v4, writes=("thread",)),
    Step("state", STATE, 4, 5, _state_v4_to_v5, writes=("thread",)),
    Step("state", STATE, 5, 6, _state_v5_to_v6, writes=("thread",)),
    Step("state", STATE, 6, 7, _state_v6_to_v7, writes=("thread", "progress")),
    Step("table", "write_approvals", 1, 2, _approvals_v1_to_v2),
)
"""Every upgrade step, by kind and subject, in version order."""

CURRENT: dict[tuple[Kind, str], int] = {
    ("state", STATE): SCHEMA_VERSION,
    ("table", "write_approvals"): 2,
    ("value", VALUE_FORMAT): 1,
}
"""The current version of each subject with more than one version so far (and the state
and value format, always named); any other table is at version 1."""

_NOUNS: dict[Kind, str] = {"state": "schema version", "table": "version",
                           "value": "value format"}


def current_version(kind: Kind, subject: str) -> int:
    """The version this program writes `subject` in (1 for a table not in `CURRENT`).

    Raises:
        KeyError: An unknown state or value subject (a bug).
    """
    if kind == "table":
        return CURRENT.get((kind, subject), 1)
    return CURRENT[(kind, subject)]


def _noun(kind: Kind, subject: str) -> str:
    return _NOUNS[kind] if kind != "table" else f"table {subject} version"


def steps_from(kind: Kind, subject: str, stored: object) -> tuple[Step, ...]:
    """The steps that bring `subject` from version `stored` to the current one, in order.

    Returns:
        No step when `stored` is current.

    Raises:
        RefusedError: `incompatible` for a version that is not an integer of at least 1,
            is newer than the current one, or has no step (a gap); nothing is defaulted.
    """
    noun, latest = _noun(kind, subject), current_version(kind, subject)
    if not isinstance(stored, int) or isinstance(stored, bool) or stored < 1:
        raise RefusedError(f"stored {noun} {stored!r} is not a known version",
                           error_code=ErrorCode.INCOMPATIBLE)
    if stored > latest:
        raise RefusedError(f"written by {noun} {stored}; this program knows versions up to "
                           f"{latest}: upgrade mandapi-resume", error_code=ErrorCode.INCOMPATIBLE)
    by_version = {s.from_version: s for s in STEPS if (s.kind, s.subject) == (kind, subject)}
    chain = []
    for version in range(stored, latest):
        step = by_version.get(version)
        if step is None or step.to_version != version + 1:
            raise RefusedError(f"no migration from {noun} {version}",
                               error_code=ErrorCode.INCOMPATIBLE)
        chain.append(step)
    return tuple(chain)


def migrate_state(values: Any, thread_id: str) -> tuple[dict[str, Any], int]:
    """Brings stored state values, read under `thread_id`, to `SCHEMA_VERSION` in memory.

    Returns:
        The migrated values (a new dict; the input is not changed) and the version
        they were stored with.

    Raises:
        RefusedError: `incompatible` for a missing, non-integer, newer or unknown
            version (`steps_from`), `damaged` when the values are not even a dict with
            a `thread`.
    """
    thread = values.get("thread") if isinstance(values, dict) else None
    if not isinstance(thread, dict):
        raise RefusedError("stored state has no thread identity", error_code=ErrorCode.DAMAGED)
    stored = thread.get("schema_version")
    current = values
    for step in steps_from("state", STATE, stored):
        current = step.upgrade(current, thread_id)
    return current, cast(int, stored)  # steps_from refused any other type


def state_write_back(values: dict[str, Any], stored_version: int) -> dict[str, Any]:
    """The channels a writer stores before its own write (rule 2): those the steps changed.

    Args:
        values: The migrated values (`migrate_state`).
        stored_version: The version they were stored with.

    Returns:
        `{channel: value}` of every channel a step from `stored_version` changes; empty
        when the state is current (nothing to write back).
    """
    channels = {c for s in steps_from("state", STATE, stored_version) for c in s.writes}
    return {channel: values[channel] for channel in sorted(channels)}


def migrate_rows(table: str, stored_version: int, rows: Iterable[dict[str, Any]],
                 lookups: Lookups) -> list[dict[str, Any]]:
    """Rows of `table` stored at `stored_version`, in the current shape, in memory (rule 1).

    Raises:
        RefusedError: `incompatible` as `steps_from`.
    """
    chain = steps_from("table", table, stored_version)
    upgraded = list(rows)
    for step in chain:
        upgraded = [step.upgrade(row, lookups) for row in upgraded]
    return upgraded


def read_table(table: VersionedTable, thread_id: str | None = None) -> list[dict[str, Any]]:
    """The rows (of `thread_id`, or all) of `table` in its current shape, upgraded in memory (rule 1).

    Returns:
        No row when the table does not exist (a database from before it).

    Raises:
        RefusedError: `incompatible` as `steps_from` (before any row is read), `damaged`
            for a row that fails its checks.
    """
    version = table.stored_version()
    if version is None:
        return []
    steps_from("table", table.name, version)
    return migrate_rows(table.name, version, table.stored_rows(version, thread_id),
                        table.lookups())


def upgrade_table(db: MigrationDb, table: VersionedTable) -> None:
    """Writes `table` back in its current version (rule 2), atomically; a no-op when current.

    In one transaction holding `TABLE_UPGRADE_LOCK` (PostgreSQL: an advisory lock;
    SQLite: the file's write lock of `BEGIN IMMEDIATE`), the stored version is read,
    every row is upgraded (`migrate_rows`) and the table is rebuilt holding them. Any
    failure rolls the whole transaction back: the old table stays as it was.

    Raises:
        RefusedError: `incompatible` as `steps_from`, `damaged` for a row that fails its
            checks; the table is unchanged.
    """
    with db.transaction():
        db.serialize_migration(TABLE_UPGRADE_LOCK)
        version = table.stored_version()
        if version is None or not steps_from("table", table.name, version):
            return  # no table yet (the schema creates it current), or current already
        table.rebuild(read_table(table))
