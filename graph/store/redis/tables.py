"""The attempt log and the tombstones in Redis (`graph.store.base.AttemptLog`, `Tombstones`).

The same rows as the SQL tables (`graph.store.sql.attempt_log`, `graph.store.sql.tombstones`), under the
keys of `graph.store.redis.keys`: a thread's attempt log is a list of JSON objects, appended
to and never changed; a tombstone is a hash that never expires. Every write is fenced by
the thread's writer lease (`graph.store.redis.lua`): a writer that lost it changes nothing.
Every value is checked as it is read, as the SQL tables check theirs (`graph.store.rows`): a row of the wrong
type or form is refused as `damaged` (exit 4), never decoded into something else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from graph.outcome import USAGE_KEYS
from graph.store.redis import keys
from graph.store.redis import lua as redis_lua
from graph.store.redis.conn import make_durable, server_errors
from graph.store.redis.rows import LOGGED
from graph.store.rows import (
    FINAL_STATUSES,
    LOG_PAYLOAD_KEYS,
    LogTally,
    Tombstone,
    add_logged_usage,
    check_log_payload,
    damaged,
    is_int,
    is_iso_time,
    is_text,
)

if TYPE_CHECKING:
    import redis

__all__ = ["RedisAttemptLog", "RedisTable", "RedisTombstones", "decoded", "log_row"]


class RedisTable:
    """What the Redis tables share: the client, messages' location, ids, keys, fenced writes.

    Every write of a thread's keys is a script of `graph.store.redis.lua` that checks the
    writer's lease token against the thread's lock key first (`_fenced`).

    Args:
        client: A client of the server (`graph.store.redis.conn.connect`), answering bytes.
        location: The redacted URL, for messages.
        tokens: The store's fencing hook (`graph.store.base.WriterLocks.fence`): this
            process's lease token for a thread ('' or None when it holds none); None
            writes as a writer holding no lease.
    """

    def __init__(self, client: redis.Redis, location: str, *,
                 tokens: Callable[[str], str | None] | None = None) -> None:
        self._client = client
        self.location = location
        self._tokens = tokens
        self._scripts: dict[str, Any] = {}

    def _fenced(self, name: str, thread_id: str, keys_: list[bytes], args: list[Any]) -> list[Any]:
        """Runs script `name` of `graph.store.redis.lua` with the token as its first argument.

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5).
            RefusedError: `damaged` (exit 4): a key of the wrong type; nothing written.
        """
        token = (self._tokens(thread_id) if self._tokens is not None else None) or ""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(getattr(redis_lua, name))
        with server_errors(self.location):
            reply = script(keys=keys_, args=[token, *args])
        return redis_lua.answer(reply, thread_id, self.location)

    def _ids(self, prefix: str) -> Iterator[str]:
        with server_errors(self.location):
            found = list(self._client.scan_iter(match=keys.pattern(prefix), count=1000))
        return (keys.suffix(key, prefix) for key in found)

    def _durable(self, what: str) -> None:
        """Waits until this write (and every earlier one) is on disk (`make_durable`).

        `appendfsync everysec` acknowledges a write up to a second before its fsync: a
        decision, a token count or a tombstone must not be lost to a crash after the
        effect it stands for (a file written, a reply paid, a thread pruned).
        """
        make_durable(self._client, self.location, what)

    def _call(self, table: str, method: str, *args: Any) -> Any:
        """`client.<method>(*args)`; a key of the wrong type is `damaged` in `table`."""
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

        with server_errors(self.location):
            try:
                return getattr(self._client, method)(*args)
            except redis.ResponseError as exc:
                if "WRONGTYPE" not in str(exc):
                    raise
                raise damaged(table, f"key {keys.shown(args[0])} has the wrong type") from None


def decoded(table: str, value: bytes) -> str:
    """A stored value as text.

    Raises:
        RefusedError: `damaged`, naming `table`, for bytes that are not UTF-8.
    """
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise damaged(table, "a value holds bytes that are not UTF-8") from None


def log_row(thread_id: str, seq: int, attempt: int, kind: str, payload: dict[str, Any],
            created_at: str) -> bytes:
    """One attempt-log row as stored: JSON (ASCII: any text, lone surrogates too).

    Besides the row's fields it holds its thread, its place in the list (`seq`, from 0)
    and a digest of all of them (`_row_digest`): a row edited in any field (its thought,
    its arguments), copied, or a list that lost rows at its start or middle is refused
    as it is read (`_log_rows`), where a SQL log has triggers against updates and deletes.
    `counted` says the thread's ledger row counts the list's rows (`graph.store.redis.lua.
    APPEND`): rows lost from the list's end, which no `seq` shows, are refused too.
    """
    row: dict[str, Any] = {"attempt": attempt, "kind": kind, "payload": payload,
                           "created_at": created_at, "thread_id": thread_id, "seq": seq,
                           "counted": True}
    row["digest"] = _row_digest(row)
    return json.dumps(row).encode()


def _row_digest(row: dict[str, Any]) -> str:
    """SHA-256 of a row's canonical JSON (sorted keys), bar its `digest`."""
    rest = {k: v for k, v in row.items() if k != "digest"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def _log_rows(found: list[bytes], thread_id: str, logged: bytes | None, *,
              has_ledger: bool = True) -> list[dict[str, Any]]:
    """The stored rows of a thread's log, checked (`_log_row`), in their list order.

    Rows from before digests (no `digest` field) may only come first; each digested row
    must match its digest and sit at its `seq`: a deleted, moved or added row is refused.
    The ledger row's count (`logged`, the list's length after the last append) must
    match the list, and must exist once any row says it is counted (`counted`, which its
    digest covers): rows popped off the list's end, or the count deleted, are refused.
    Logs written before the count existed have no counted row and no count until their
    next append, which sets it. Without a ledger row (`has_ledger` False) nothing is
    judged by the count: a thread with a log but no ledger row is refused by the
    ledger's own readers.
    """
    count = None if logged is None else decoded("attempt_log", logged)
    if count is not None and count != str(len(found)):
        raise damaged("attempt_log", f"thread {thread_id!r}'s log holds {len(found)} rows, but "
                      f"its ledger row counted {count:.20}: rows were deleted or added")
    rows, digested = [], False
    for index, raw in enumerate(found):
        row, seq, counted = _log_row(raw, thread_id)
        if counted and count is None and has_ledger:
            raise damaged("attempt_log", f"thread {thread_id!r}'s log is counted, but its "
                          "ledger row holds no count: the count was deleted")
        if seq is None and digested:
            raise damaged("attempt_log", f"thread {thread_id!r}'s log row {index} has no "
                          "digest after rows that have one: edited")
        if seq is not None and seq != index:
            raise damaged("attempt_log", f"thread {thread_id!r}'s log row {index} was stored "
                          f"as row {seq}: rows were deleted, moved or added")
        digested = digested or seq is not None
        rows.append(row)
    return rows


def _log_row(raw: bytes, thread_id: str) -> tuple[dict[str, Any], int | None, bool]:
    """One stored attempt-log row, checked as `graph.store.sql.attempt_log.SqlAttemptLog.rows` checks.

    A row names its thread (`thread_id`; rows written before it did lack it): a row
    copied from another thread's log is refused, even where counts and tokens agree.
    Returns the row's fields, its `seq` (None for a row from before digests) and whether
    it is `counted` (`log_row`).
    """
    try:
        row = json.loads(decoded("attempt_log", raw))
    except ValueError:
        raise damaged("attempt_log", "a row is not JSON") from None
    seq, counted = None, False
    if isinstance(row, dict) and "digest" in row:
        if (row.get("digest") != _row_digest(row) or not is_int(row.get("seq"))
                or "thread_id" not in row or row.get("counted", True) is not True):
            raise damaged("attempt_log", f"a row of thread {thread_id!r}'s log does not match "
                          "its digest: edited")
        seq = row.pop("seq")
        row.pop("digest")
        counted = row.pop("counted", False)
    if isinstance(row, dict) and "thread_id" in row:
        if row.pop("thread_id") != thread_id:
            raise damaged("attempt_log", f"a row of thread {thread_id!r}'s log names another "
                          "thread: copied from its log")
    if (not isinstance(row, dict) or set(row) != {"attempt", "kind", "payload", "created_at"}
            or not is_int(row["attempt"], 1) or row["kind"] not in LOG_PAYLOAD_KEYS
            or not isinstance(row["payload"], dict) or not is_text(row["created_at"])):
        raise damaged("attempt_log", "a row has other fields or a field of the wrong type")
    payload = row["payload"]
    check_log_payload(row["kind"], payload)
    tokens = (payload.get("usage") or {}).get("total_tokens")  # summed for the token cap
    if tokens is not None and not is_int(tokens):
        raise damaged("attempt_log", "the recorded token usage is not a whole number")
    return row, seq, counted


_APPEND_TRIES = 3
"""How often `_append_rows` encodes its rows again for a log that grew meanwhile."""


class RedisAttemptLog(RedisTable):
    """The append-only attempt log: a list per thread (`graph.store.redis.keys.LOG`).

    A row is appended at once (as on PostgreSQL), and on disk when `record` returns:
    its usage counts toward the token cap (INVARIANTS I11).
    """

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        """Appends one row (`kind`: `reason` or `tool`)."""
        self._append_rows(thread_id, [(attempt, kind, payload,
                                       datetime.now(UTC).isoformat(timespec="seconds"))])
        self._durable(f"thread {thread_id!r}: attempt {attempt}'s log row is stored, but")

    def _append_rows(self, thread_id: str, rows: list[tuple[int, str, dict[str, Any], str]]
                     ) -> None:
        """Appends `(attempt, kind, payload, created_at)` rows in one fenced script (`APPEND`).

        Each row is stored with its place in the list (`log_row`'s `seq`), which its
        digest covers. The script pushes the rows only while the list's length is the
        `seq` they were encoded for, checked in the same step as the lease token; when
        it is not (a writer holding no lease appended meanwhile) it answers the length
        and the rows are encoded again for it.

        Raises:
            BusyError: The thread's lease is another's, or this process lost it (exit 5);
                or the list kept growing under a writer holding no lease.
            RefusedError: `damaged` (exit 4): the log is not a list; nothing written.
        """
        seq = self._call("attempt_log", "llen", keys.log_key(thread_id))
        for _ in range(_APPEND_TRIES):
            encoded = [log_row(thread_id, seq + i, attempt, kind, payload, created_at)
                       for i, (attempt, kind, payload, created_at) in enumerate(rows)]
            reply = self._fenced("APPEND", thread_id,
                                 [keys.log_key(thread_id), keys.lock_key(thread_id),
                                  keys.ledger_key(thread_id)], [seq, *encoded])
            if reply[0] != "moved":
                return
            seq = int(reply[1])
        raise redis_lua.lost_lease(thread_id, self.location)

    def import_rows(self, thread_id: str, rows: list[dict[str, Any]]) -> None:
        """Appends rows as `rows` returned them elsewhere, times kept (`graph.copy`)."""
        if rows:
            self._append_rows(thread_id, [(row["attempt"], row["kind"], row["payload"],
                                           row["created_at"]) for row in rows])
        self._durable(f"thread {thread_id!r}: its copied log is stored, but")

    def delete_thread(self, thread_id: str) -> None:
        """Deletes the thread's rows (retention)."""
        self._fenced("DELETE", thread_id, [keys.lock_key(thread_id), keys.log_key(thread_id)], [])

    def rows(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's rows, oldest first: `attempt`, `kind`, `payload` (dict), `created_at`.

        Raises:
            RefusedError: `damaged` for a key that is not a list, a row that fails its
                checks, or reason rows not in increasing attempt order (each attempt's
                reply is logged once, in order).
        """
        found, logged, has_ledger = self._read(thread_id)
        rows = _log_rows(found, thread_id, logged, has_ledger=has_ledger)
        reasons = [r["attempt"] for r in rows if r["kind"] == "reason"]
        if any(later <= earlier for earlier, later in zip(reasons, reasons[1:], strict=False)):
            raise damaged("attempt_log", "its reason rows are not one per attempt, in order: "
                          "a row was added, moved or copied")
        return rows

    def _read(self, thread_id: str) -> tuple[list[bytes], bytes | None, bool]:
        """The log's rows, the ledger row's count of them and whether it exists, read together (`MULTI`).

        Raises:
            RefusedError: `damaged` when the log is not a list or the ledger row not a hash.
        """
        import redis  # noqa: PLC0415 - the redis extra: imported only where a Redis store is used

        with server_errors(self.location), self._client.pipeline(transaction=True) as pipe:
            pipe.lrange(keys.log_key(thread_id), 0, -1)
            pipe.hget(keys.ledger_key(thread_id), LOGGED)
            pipe.exists(keys.ledger_key(thread_id))
            found, logged, ledger = pipe.execute(raise_on_error=False)
            for value, key in ((found, keys.log_key(thread_id)), (logged, keys.ledger_key(thread_id))):
                if isinstance(value, redis.ResponseError):
                    if "WRONGTYPE" not in str(value):
                        raise value
                    raise damaged("attempt_log" if value is found else "attempt_ledger",
                                  f"key {keys.shown(key)} has the wrong type")
        return found, logged, bool(ledger)

    def last_attempt(self, thread_id: str) -> int:
        """The highest attempt among the thread's `reason` rows; 0 when there are none.

        Raises:
            RefusedError: `damaged` for a row that fails its checks (`rows`).
        """
        return self.tally(thread_id).last_attempt

    def tally(self, thread_id: str) -> LogTally:
        """`last_attempt`, `usage` and the checked rows they were read from, for `covers`.

        A step checks the ledger against the highest attempt, then the log against the
        checkpoint (`covers`), then reports the figures (`usage`): one read of the list
        serves all three (each read parses and checks every row, and the log grows by a
        row or two per step).

        Raises:
            RefusedError: `damaged` for a row that fails its checks (`rows`), or a usage
                value that is not a non-negative whole number.
        """
        rows = self.rows(thread_id)
        return LogTally(max((r["attempt"] for r in rows if r["kind"] == "reason"), default=0),
                        _usage(rows), rows)

    def usage(self, thread_id: str) -> dict[str, int]:
        """`prompt_tokens`, `completion_tokens`, `total_tokens` summed over `reason` rows.

        Raises:
            RefusedError: `damaged` for a row that fails its checks, or a value that is
                not a non-negative whole number.
        """
        return _usage(self.rows(thread_id))

    def used_tokens(self, thread_id: str) -> int:
        """The sum of `usage.total_tokens` over the thread's `reason` rows; 0 when none.

        Raises:
            RefusedError: `damaged`, as `usage`.
        """
        return self.usage(thread_id)["total_tokens"]

    def covers(self, thread_id: str, values: dict[str, Any],
               rows: list[dict[str, Any]] | None = None, usage: dict[str, int] | None = None) -> None:
        """Refuses a log that lacks rows the thread's checkpoint shows were made.

        `nodes.reason` appends an attempt's row before the node returns, so before the
        checkpoint holding its reply: the log's replies (reason rows whose outcome is
        `answer` or `tool_calls`) are at least the checkpoint's assistant messages, and
        its summed tokens at least `progress.usage.total_tokens`. A Redis list has no
        trigger against deletes (the SQL log's rows are guarded by triggers, and SQL
        databases keep threads whose replies predate the log), so a log deleted, cut
        short or replaced by another thread's is caught here, before any request.

        Args:
            thread_id: The thread.
            values: Its checked state values (`messages`, `progress`).
            rows: Checked rows to judge instead of reading this log's: the ones a step
                just read (`tally`), or another store's (`graph.copy` asks
                whether they would pass here); None reads the thread's own.
            usage: The usage those rows sum to when it is summed already (a step's
                `tally.usage`); None sums them here.

        Raises:
            RefusedError: `damaged` (exit 4) when the log falls short of the checkpoint,
                or a row fails its checks (`rows`).
        """
        rows = self.rows(thread_id) if rows is None else rows
        logged = sum(1 for r in rows if r["kind"] == "reason"
                     and r["payload"].get("outcome") in ("answer", "tool_calls", "truncated"))
        replies = sum(1 for m in values["messages"] if m["role"] == "assistant")
        if logged < replies:
            raise damaged("attempt_log", f"thread {thread_id!r}'s log holds {logged} "
                          f"reply row(s), but its checkpoint shows {replies} replies: rows "
                          "were deleted or replaced")
        used = (_usage(rows) if usage is None else usage)["total_tokens"]
        shown = int(values["progress"]["usage"]["total_tokens"])
        if used < shown:
            raise damaged("attempt_log", f"thread {thread_id!r}'s log records {used} "
                          f"tokens, but its checkpoint shows {shown}: rows were deleted or "
                          "replaced")


def _usage(rows: list[dict[str, Any]]) -> dict[str, int]:
    """`USAGE_KEYS` summed over checked `reason` rows (`RedisAttemptLog.rows`); absent ones are 0.

    Raises:
        RefusedError: `damaged` for a value that is not a non-negative whole number.
    """
    total = dict.fromkeys(USAGE_KEYS, 0)
    for row in rows:
        add_logged_usage(total, row["kind"], row["payload"])
    return total


class RedisTombstones(RedisTable):
    """Tombstones of pruned threads: a hash per thread that never expires."""

    def get(self, thread_id: str) -> Tombstone | None:
        """The thread's tombstone, or None.

        Raises:
            RefusedError: `damaged` for a key that is not a hash of exactly its two fields,
                a status a thread cannot be pruned in, or a time that is not ISO 8601.
        """
        raw: dict[bytes, bytes] = self._call("thread_tombstones", "hgetall",
                                             keys.tombstone_key(thread_id))
        if not raw:
            return None
        fields = {decoded("thread_tombstones", k): decoded("thread_tombstones", v)
                  for k, v in raw.items()}
        if (set(fields) != {"final_status", "pruned_at"} or fields["final_status"] not in FINAL_STATUSES
                or not is_iso_time(fields["pruned_at"])):
            raise damaged("thread_tombstones", f"thread {thread_id!r} has a tombstone of the "
                          "wrong form")
        return Tombstone(thread_id, fields["final_status"], fields["pruned_at"])

    def add(self, tombstone: Tombstone) -> None:
        """Records a tombstone; a thread that already has one keeps it."""
        thread_id = tombstone.thread_id
        self._fenced("ADD_TOMBSTONE", thread_id,
                     [keys.tombstone_key(thread_id), keys.lock_key(thread_id)],
                     [tombstone.final_status, tombstone.pruned_at])
        self._durable(f"thread {tombstone.thread_id!r}: its tombstone is stored, but")

    def thread_ids(self) -> set[str]:
        """Every tombstoned thread id, read without checking the tombstones."""
        return set(self._ids(keys.TOMBSTONE))

    def remove(self, thread_id: str) -> None:
        """Deletes the tombstone (for `--restart-pruned`)."""
        self._fenced("DELETE", thread_id,
                     [keys.lock_key(thread_id), keys.tombstone_key(thread_id)], [])
