"""What `graph.api.Database` does without advancing a thread: read, prune, verify, copy.

Split from `graph.api` to keep modules small; import from `graph.api`. Each method is
what `graph.history`, `graph.prune`, `graph.verify` or `graph.copy` does (those commands
call these).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from graph.api._args import check_source, checked_call
from graph.api._base import DatabaseBase, known_errors
from graph.errors import UsageError
from graph.settings import Source, check_flag, check_names, check_path, setting_name, shown

if TYPE_CHECKING:
    from graph.threads.retention import PruneReport
    from graph.threads.verification import VerifyReport

MAX_CHECKPOINTS_PAGE = 10_000
"""The most checkpoints one `history` call lists."""


@checked_call
def verify_database(db: str | os.PathLike[str] | None = None, *,
                    source: Source = "keywords") -> VerifyReport:
    """SQLite's full integrity check, then every thread's checks (`graph.verify`).

    A function, not a `Database` method, because it must not open the database first:
    damage an ordinary open would refuse is listed as problems. Reads only.

    Args:
        db: A SQLite file path (a str or an `os.PathLike`) or a `postgresql://` URL;
            None: `$GRAPH_DB`, else `./checkpoints.sqlite`.
        source: How refusals name `db` (`keywords`: `db`; `flags`: `--db`).

    Returns:
        The problems (empty when everything reads back intact) and how many threads and
        checkpoints were checked (`graph.threads.verification.VerifyReport`).

    Raises:
        RefusedError: The file is missing (`no_such_file`) or no checkpoint database.
        UsageError: `db` is empty, not a usable path or URL, or may not be read; an
            unknown keyword or a value of the wrong type.
    """
    from graph.settings import database_location
    from graph.threads.verification import check_database

    name = setting_name("db", check_source(source))
    path = check_path(db, name)
    with known_errors():
        return check_database(database_location(path, name), name)


class StoreOperations(DatabaseBase):
    """History, listing, retention, verification and copying of a `graph.api.Database`."""

    @checked_call
    def history(self, thread_id: str, checkpoints: int = 50) -> dict[str, Any]:
        """What `graph.history --thread ID --json` prints (`graph.threads.history`).

        Args:
            thread_id: The thread, or a parent task (`graph.batch --parent ID`).
            checkpoints: How many of the latest checkpoints to list (1 to 10000).

        Returns:
            `header`, `steps`, `checkpoints`, `checkpoints_total`, `checkpoints_trimmed`,
            `decisions` and `parent_result` (None unless the thread is a parent task);
            a parent that is no thread itself gives `{"parent_result": ...}` alone.

        Raises:
            RefusedError: `no_such_thread`, or a checkpoint in the page fails its checks.
            UsageError: An invalid thread id, or `checkpoints` not an int from 1 to 10000.
        """
        from graph.settings import check_thread_id
        from graph.threads.history import thread_or_parent

        check_thread_id(thread_id)
        if (not isinstance(checkpoints, int) or isinstance(checkpoints, bool)
                or not 1 <= checkpoints <= MAX_CHECKPOINTS_PAGE):
            raise UsageError(f"{setting_name('checkpoints', self.source)} must be a whole "
                             f"number from 1 to {MAX_CHECKPOINTS_PAGE}, not {checkpoints!r}")
        return self._call(thread_or_parent, self.store, thread_id, checkpoints)

    @checked_call
    def threads(self) -> list[dict[str, Any]]:
        """Every thread, by thread id, as `graph.history --list --json` lists them.

        Returns:
            Dicts with `thread_id`, `status` (or `unreadable: CODE`), `attempts`,
            `max_attempts`, `updated_at` and `task` (`graph.threads.history.list_threads`).
        """
        from graph.threads.history import list_threads

        return self._call(list_threads, self.store)

    @checked_call
    def prune_report(self, *, completed: str | timedelta = "24h", failed: str | timedelta = "7d",
                     dry_run: bool = False) -> PruneReport:
        """Deletes finished threads older than the ages; never one that can continue.

        Every other thread is trimmed to its checkpoint window. A thread busy in another
        process, or one that cannot be read, is kept (and noted in `skipped`).

        Args:
            completed: Age of `done` threads to delete: text (`90s`, `30m`, `24h`, `7d`)
                or a `timedelta`.
            failed: Age of `exhausted` and `cancelled` threads to delete.
            dry_run: Only select (reads only): True or False.

        Returns:
            The typed report (`graph.threads.retention.PruneReport`): the candidates with their
            status and last update, what was pruned, skipped, swept, trimmed and freed.

        Raises:
            UsageError: An age not written like `24h`, negative or neither text nor a
                `timedelta`, or `dry_run` not a bool (named as the keyword); without
                `dry_run`, a database opened `read_only=True`.
        """
        from graph.threads.retention import retain

        check_flag(dry_run, self._name("dry_run"))
        if not dry_run:
            self._writable("prune")
        return self._call(retain, self.store, completed=self._age("completed", completed),
                          failed=self._age("failed", failed), dry_run=dry_run)

    def _age(self, key: str, age: str | timedelta) -> timedelta:
        from graph.store.ages import parse_age

        if isinstance(age, timedelta):
            if age < timedelta(0):
                raise UsageError(f"{key} must not be negative")
            return age
        if not isinstance(age, str):
            raise UsageError(f"{self._name(key)} must be an age such as '24h' or a timedelta, "
                             f"not {shown(age)}")
        return parse_age(age, key if self.source == "keywords" else "age")

    @checked_call
    def prune(self, *, completed: str | timedelta = "24h", failed: str | timedelta = "7d",
              dry_run: bool = False) -> dict[str, Any]:
        """`prune_report` as the dict `graph.prune --json` prints (without `exit_code`).

        Returns:
            `pruned`, `skipped`, `swept`, `trimmed`, `freed_bytes`; with `dry_run`,
            `would_prune` (thread id, status, last update) and `skipped`.

        Raises:
            UsageError: As `prune_report`.
        """
        return self.prune_report(completed=completed, failed=failed, dry_run=dry_run).to_dict()

    @checked_call
    def verify(self) -> list[str]:
        """SQLite's full integrity check and every thread's checks (`graph.verify`).

        Returns:
            One line per problem; empty when everything reads back intact. For the
            counts of threads and checkpoints checked, use `verify_database`.
        """
        return self._call(verify_database, self.settings.db, source=self.source).problems

    @checked_call
    def copy_to(self, target: StoreOperations,
                thread_ids: Sequence[str] | None = None) -> list[str]:
        """Copies threads, whole and checked, into the open database `target` (`graph.copy`).

        Every source thread is loaded and checked first; if one already exists at the
        target, nothing is copied. A copy, not a move: this database is left as it was.

        Args:
            target: Another open `Database` (opened with `create=True` to make its file).
            thread_ids: The threads to copy, a list or tuple of str; None: every thread
                (tombstones included); an empty list copies nothing.

        Returns:
            The copied thread ids, sorted.

        Raises:
            RefusedError: `exists` at the target, `no_such_thread` here, or a thread
                fails its checks here (`graph.threads.copy.copy_threads`).
            UsageError: An invalid thread id; `target` not a `Database`, or closed;
                `thread_ids` not a list or tuple of str (a bare str is refused).
        """
        from graph.settings import check_thread_id
        from graph.threads.copy import copy_threads

        if not isinstance(target, StoreOperations):
            raise UsageError(f"target must be an open graph.api.Database, not {shown(target)}")
        given = () if thread_ids is None else check_names(thread_ids, "thread_ids", "thread ids")
        ids = [check_thread_id(t) for t in dict.fromkeys(given)]
        target.store  # noqa: B018 - refuses a closed target before anything is read
        target._writable("copy_to's target")
        if thread_ids is not None and not ids:
            return []
        with target._lock:
            return self._call(copy_threads, self.store, target.store, ids or None)

    # -- async variants: the same calls in a worker thread ------------------------------

    @checked_call
    async def ahistory(self, thread_id: str, checkpoints: int = 50) -> dict[str, Any]:
        """`history` in a worker thread."""
        return await asyncio.to_thread(self.history, thread_id, checkpoints)

    @checked_call
    async def athreads(self) -> list[dict[str, Any]]:
        """`threads` in a worker thread."""
        return await asyncio.to_thread(self.threads)

    @checked_call
    async def aprune(self, **kwargs: Any) -> dict[str, Any]:
        """`prune` in a worker thread."""
        return await asyncio.to_thread(self.prune, **kwargs)

    @checked_call
    async def aprune_report(self, **kwargs: Any) -> PruneReport:
        """`prune_report` in a worker thread."""
        return await asyncio.to_thread(self.prune_report, **kwargs)

    @checked_call
    async def averify(self) -> list[str]:
        """`verify` in a worker thread."""
        return await asyncio.to_thread(self.verify)

    @checked_call
    async def acopy_to(self, target: StoreOperations, thread_ids: Sequence[str] | None = None
                       ) -> list[str]:
        """`copy_to` in a worker thread."""
        return await asyncio.to_thread(self.copy_to, target, thread_ids)
