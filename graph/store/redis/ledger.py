"""The attempt ledger in Redis: the SQL ledger's operations and promises, as Lua scripts.

The same row per thread (a hash, `graph.store.redis.keys.LEDGER`) and request caps as
`graph.store.sql.ledger.SqlLedger`, with the same guarantees (INVARIANTS I1, I2): an attempt is
counted before it may be claimed, each attempt number is claimed once and in order, a
claim charges its request cap in the same atomic operation or fails whole, and no
operation lowers a count or changes a maximum (`graph.store.redis.lua`; Redis has no
triggers, so nothing guards against a client other than this program writing the keys:
loading refuses what they leave inconsistent). On top of the SQL ledger:

* Durability before the request: the server must keep its append-only file
  (`graph.store.redis.conn.check_durable`, checked before the first write: exit 2,
  `db_not_durable`), and each claim is sent with `WAITAOF` in one pipeline, so
  `claim` returns True only once the claim is fsynced on the server's disk.
* Fencing (INVARIANTS I8): every write of a thread's row (`create`, `count`, `claim`,
  `insert_row`, `touch`, `delete`) is refused (`BusyError`, exit 5) unless the caller
  holds the thread's current writer lease (`graph.store.redis.locks`), checked by the
  script itself, or nobody holds one; so a writer whose lease ran out while it was
  paused can never count, claim or change the row again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from graph.errors import ErrorCode, RefusedError
from graph.store.redis import keys
from graph.store.redis import lua as redis_lua
from graph.store.redis.conn import WAITAOF, check_durable, check_fsynced, make_durable, server_errors
from graph.store.redis.rows import RedisLedgerRows
from graph.store.rows import LedgerRow, damaged, is_int, is_iso_time
from nodes.context import LedgerEntry

if TYPE_CHECKING:
    import redis

__all__ = ["RedisLedger"]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class RedisLedger(RedisLedgerRows):
    """The attempt ledger and request caps of one Redis database (module doc).

    Args:
        client: A client of the server (`graph.store.redis.conn.connect`).
        location: The redacted URL, for messages.
        tokens: Gives this process's lease token for a thread (`RedisThreadLocks.token`),
            or None when it holds none; without it every caller counts as holding none.
    """

    def __init__(self, client: redis.Redis, location: str, *,
                 tokens: Callable[[str], str | None] | None = None) -> None:
        super().__init__(client, location)
        self._tokens = tokens or (lambda _thread_id: None)
        self._durable = False
        self._scripts = {name: client.register_script(getattr(redis_lua, name))
                         for name in ("COUNT", "CLAIM", "CREATE", "INSERT_ROW", "ENSURE_CAP", "TOUCH",
                                     "DELETE")}

    def check_durable(self) -> None:
        """Refuses a server that cannot fsync a claim (`graph.store.redis.conn.check_durable`), once.

        Runs before the first write of this ledger, so nothing is counted on such a server.

        Raises:
            UsageError: `db_not_durable` (exit 2).
        """
        if not self._durable:
            with server_errors(self.location):
                check_durable(self._client, self.location)
            self._durable = True

    def _run(self, name: str, keys_: list[bytes], args: list[Any]) -> list[Any]:
        self.check_durable()
        with server_errors(self.location):
            reply = self._scripts[name](keys=keys_, args=args)
        return self._checked(reply)

    @staticmethod
    def _checked(reply: list[Any]) -> list[Any]:
        """The script's answer with its status as text; `damaged` raised (exit 4)."""
        status = reply[0].decode()
        if status == "damaged":
            raise damaged(reply[1].decode(), reply[2].decode(errors="replace"))
        return [status, *reply[1:]]

    def _entry(self, thread_id: str, reply: list[Any]) -> LedgerEntry:
        if reply[0] == "busy":
            raise redis_lua.lost_lease(thread_id, self.location)
        if reply[0] == "none":
            raise LookupError(f"attempt ledger has no row for thread {thread_id!r}")
        return LedgerEntry(*(int(v) for v in reply[1:4]))

    def _entry_status(self, thread_id: str, reply: list[Any]) -> str:
        """The status of a script's reply; `busy` raised (`BusyError`, exit 5)."""
        if reply[0] == "busy":
            raise redis_lua.lost_lease(thread_id, self.location)
        return str(reply[0])

    def _token(self, thread_id: str) -> str:
        """The store's fencing hook (`graph.store.base.WriterLocks.fence`) for the thread's row.

        Returns the lease token the scripts compare on the server ('' for none).
        """
        return self._tokens(thread_id) or ""

    def create(self, thread_id: str, max_attempts: int) -> LedgerEntry:
        """Creates the thread's row with no attempts; keeps an existing row as it is.

        Returns:
            The row after the call (check `max_attempts` and `attempts` on reuse).

        Raises:
            ValueError: `max_attempts` is below 1 (the SQL table's CHECK refuses it too).
            RefusedError: `damaged` for an existing row that fails its checks.
        """
        if not is_int(max_attempts, 1):
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts!r}")
        reply = self._run("CREATE", [keys.ledger_key(thread_id), keys.lock_key(thread_id)],
                          [max_attempts, _now(), self._token(thread_id)])
        return self._entry(thread_id, reply)

    def count(self, thread_id: str) -> LedgerEntry:
        """Counts a new attempt unless an unclaimed one exists or the maximum is reached.

        Returns:
            The entry after the call.

        Raises:
            LookupError: The ledger has no row for the thread.
            BusyError: The caller does not hold the thread's current lease (exit 5).
            RefusedError: `damaged` (exit 4), changing nothing.
        """
        reply = self._run("COUNT", [keys.ledger_key(thread_id), keys.lock_key(thread_id)],
                          [_now(), self._token(thread_id)])
        return self._entry(thread_id, reply)

    def claim(self, thread_id: str, attempt: int, charge: str | None = None) -> bool:
        """Marks counted attempt `attempt` (1-based) as sent; True exactly once per attempt.

        The claim and a `WAITAOF` go in one pipeline: True means the claim (and the
        charge of `charge`) is fsynced to the server's append-only file.

        Args:
            thread_id: The thread.
            attempt: The counted attempt to claim.
            charge: A request cap (a batch or a parent task) that must also have room;
                it is charged in the same operation.

        Returns:
            False, changing nothing, when the attempt is not claimable or the cap is
            missing or full.

        Raises:
            BusyError: The caller does not hold the thread's current lease (exit 5).
            NotDurableError: Claimed, but the fsync was not confirmed: the attempt is
                spent and its request must not be sent (exit 6).
            RefusedError: `damaged` (exit 4), changing nothing.
        """
        keys_ = [keys.ledger_key(thread_id), keys.lock_key(thread_id)]
        if charge is not None:
            keys_.append(keys.cap_key(charge))
        self.check_durable()
        with server_errors(self.location):
            pipe = self._client.pipeline(transaction=False)
            self._scripts["CLAIM"](keys=keys_, args=[attempt, _now(), self._token(thread_id)],
                                   client=pipe)
            pipe.execute_command(*WAITAOF)
            reply, fsynced = pipe.execute(raise_on_error=False)
            if isinstance(reply, Exception):
                raise reply
        checked = self._checked(reply)
        if checked[0] == "busy":
            self._entry(thread_id, checked)  # raises BusyError
        if checked[0] != "ok":
            return False
        check_fsynced(fsynced, f"thread {thread_id!r}: attempt {attempt} is claimed, but")
        return True

    def make_durable(self, what: str) -> None:
        """Waits until every write acknowledged so far is on disk (`graph.store.redis.conn.make_durable`).

        Raises:
            NotDurableError: Not confirmed in time (exit 6); the effect must not happen.
        """
        make_durable(self._client, self.location, what)

    def insert_row(self, row: LedgerRow) -> None:
        """Inserts a whole row as it was elsewhere (`graph.copy`).

        Raises:
            ValueError: The row's counts or times are impossible (nothing is written).
            RefusedError: `exists` when the thread has a row here already.
        """
        thread_id, *values = astuple(row)
        if not (all(is_int(v) for v in values[:3]) and row.claimed <= row.attempts <= row.max_attempts
                and row.max_attempts >= 1 and is_iso_time(row.created_at)
                and is_iso_time(row.updated_at)):
            raise ValueError(f"impossible ledger row {row!r}")
        reply = self._run("INSERT_ROW", [keys.ledger_key(thread_id), keys.lock_key(thread_id)],
                          [*values, self._token(thread_id)])
        if self._entry_status(thread_id, reply) == "exists":
            raise RefusedError("the thread has a ledger row here already", thread_id=thread_id,
                               error_code=ErrorCode.EXISTS, location=self.location)

    def ensure_cap(self, cap_id: str, max_requests: int) -> tuple[int, int]:
        """Creates request cap `cap_id` if new; returns its `(requests, max_requests)`.

        A cap is never reset: an existing cap keeps its count and its maximum.

        Raises:
            RefusedError: `damaged` for an existing cap that fails its checks.
        """
        reply = self._run("ENSURE_CAP", [keys.cap_key(cap_id)], [max_requests, 0, 0])
        return int(reply[1]), int(reply[2])

    def insert_cap(self, cap_id: str, requests: int, max_requests: int) -> None:
        """Inserts a cap with its count as it was elsewhere (`graph.copy`).

        Raises:
            RefusedError: `exists` when a cap of that name is here already.
        """
        if self._run("ENSURE_CAP", [keys.cap_key(cap_id)], [max_requests, requests, 1])[0] == "exists":
            raise RefusedError(f"request cap {cap_id!r} exists here already",
                               error_code=ErrorCode.EXISTS, location=self.location)

    def touch(self, thread_id: str) -> None:
        """Sets the row's `updated_at` to now (a status change without an attempt)."""
        reply = self._run("TOUCH", [keys.ledger_key(thread_id), keys.lock_key(thread_id)],
                          [_now(), self._token(thread_id)])
        self._entry_status(thread_id, reply)

    def delete(self, thread_id: str) -> None:
        """Deletes the thread's row: only retention and `--restart-pruned` do this."""
        reply = self._run("DELETE", [keys.lock_key(thread_id), keys.ledger_key(thread_id)],
                          [self._token(thread_id)])
        self._entry_status(thread_id, reply)
