"""mandapi-resume: long LLM tasks as short, resumable, budget-capped LangGraph steps.

The folders are layers, read top down; a module imports only from layers below its own
(the import-linter contracts in pyproject.toml, checked in CI):

- faces: `run`, `history`, `prune`, `copy`, `verify`, `batch`, `queue`, `studio`,
  `console` (and `replay`, which drives them): thin argparse layers.
- `cli`: the faces' shared argparse helpers and one error shape.
- `api`: the Python API (`graph.api`), what the commands do, as typed calls.
- `fleet`: many threads (tasks files, a batch's request cap, the queue worker).
- `threads` (history, retention, copy, verification) and `step`: `graph.step.advance`
  advances one thread: open, check the thread once, invoke (budget counts, reason claims
  and sends), record the outcome.
- `checkpoints`: fail-closed reading of a thread's stored state.
- `store`: ONE interface (`graph.store.base`) for SQLite, PostgreSQL and Redis;
  `graph.store.open_store` is the only place a backend is chosen.
- `agent` (the graph: `build_graph`, routers, first state), `settings` (every input
  checked once), `errors` (exit codes, error codes), `text`, `outcome`.

Where an attempt gets counted, and where a second writer could be stopped (the promises
are INVARIANTS I1, I2, I8 in `INVARIANTS.md` at the repository's root). To check it in
the code for the default backend (SQLite): the count and the claim in `nodes/budget.py`,
`nodes/reason.py`, `graph/store/sql/ledger.py` and `graph/store/sqlite/ledger.py` (the
durability wait); the second writer in `graph/step/advance.py` (the hold),
`graph/store/sqlite/locks.py` (the lock and `fence`) and `graph/store/sql/build.py`
(where `fence` is handed to every table and the saver).

1. One step holds the thread's writer lock throughout: `graph.step.advance.advance` runs
   inside `store.locks.hold(thread_id)` (`graph.store.base.WriterLocks.hold`). A second
   writer is stopped there first: `BusyError`, exit 5, before anything is counted.
   SQLite: a byte-range lock on the database file (`graph.store.sqlite.locks`);
   PostgreSQL: a session advisory lock (`graph.store.postgres.locks`); Redis: a lease
   key with a token (`graph.store.redis.locks`).
2. Counted: the budget node (`nodes/budget.py`, `budget_node`) calls
   `ctx.ledger.count(thread_id)`: the attempt ledger (`graph.store.base.Ledger.count`;
   SQL: `SqlLedger.count` in `graph/store/sql/ledger.py`, one conditional statement:
   attempts + 1 only while every counted attempt is claimed and attempts < max_attempts;
   Redis: a Lua script, `graph.store.redis.ledger`). An attempt counted but never
   claimed (a crash between) is reused, never counted twice.
3. Claimed before sending: the reason node (`nodes/reason.py`, `reason_node`) calls
   `ctx.ledger.claim(thread_id, attempt, charge)` and sends its one request
   (`ctx.model.complete`) only when that returns True; a claim succeeds once per attempt
   (`SqlLedger.claim`: claimed becomes `attempt` only where it was `attempt - 1`),
   so a re-run after a crash sends nothing.
4. Durable before sending (the wait): `claim` returns only once the claim is on disk.
   SQLite: `SqliteLedger.claim` (`graph/store/sqlite/ledger.py`) commits, then
   `make_durable` copies the `-wal` into the database file (a synced `TRUNCATE`
   checkpoint), waiting up to the busy timeout; past it `NotDurableError`, exit 6
   `wal_busy`, the attempt spent and nothing sent. PostgreSQL: the autocommitted
   statement with `synchronous_commit` on (`SqlLedger.make_durable` does nothing more).
   Redis: the claim and a `WAITAOF` in one pipeline (`graph.store.redis.ledger`).
5. Fenced: every write of a thread's rows calls the one fencing hook
   `WriterLocks.fence(thread_id)` (`graph.store.base`) first, and it refuses a store
   that does not hold the thread's lock while another does (`BusyError`, exit 5,
   nothing written): the ledger's `count`, `claim`, `create`, `insert_row`, `touch`,
   `delete` (each starts with `self._fence` in `graph/store/sql/ledger.py`); the attempt
   log, decisions, tombstones and summaries (`graph.store.sql.attempt_log`, `approvals`,
   `tombstones`, `summaries`); LangGraph's `put` and `put_writes`
   (`graph.store.saver.CheckedSaver`), `delete_thread` and the checkpoint window's trims
   (`graph.store.sql.window`). The hook reaches every table and the saver in one place
   per backend: `graph.store.sql.build.sql_store` (SQLite, PostgreSQL) and
   `graph.store.redis.open` hand each `locks.fence`. On Redis the hook hands the write
   its lease token and every write of a thread is one Lua script that checks it on the
   server in the same step (`graph.store.redis.lua`), so a writer paused past its lease
   changes nothing and exits 5. A save LangGraph runs in the background and whose error
   it drops (after an `interrupt_after` node) is raised by the step afterwards
   (`graph.store.base.Store.raise_failed_write`).

Nothing is compiled or opened at import time: `graph.agent.build_graph` compiles the
graph for a given checkpointer, and `graph.store.open_store` opens a database.
"""

import importlib.util as _importlib_util
import json as _json
import sys as _sys
from pathlib import Path as _Path

from graph.errors import ErrorCode as _ErrorCode
from graph.errors import error_line as _error_line
from graph.errors import missing_dependency as _missing_dependency

__all__: list[str] = []


def _shadowing_nodes() -> str | None:
    """The file or folder that `import nodes` would find instead of ours, or None.

    A folder with its own `nodes/` package (or `nodes.py`) first on `sys.path`, as the
    current folder is for `python -m`, hides ours: `graph` imports `nodes.*` and fails.
    """
    try:
        spec = _importlib_util.find_spec("nodes")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    found = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    ours = _Path(__file__).resolve().parent.parent / "nodes"
    if any(place and _Path(place).resolve() == ours for place in found):
        return None
    return next((place for place in found if place), None)


def _refuse_to_start(message: str, for_import: ImportError) -> None:
    """Ends a command that cannot start (exit 2, `usage`), or fails an import.

    For a command (`python -m graph.X`, found while `sys.argv[0]` is still `-m`) one
    `error (usage): ...` line on stderr, or with `--json` one JSON object on stdout
    (`error`, `error_code`, `exit_code`), then exit 2. For an import from a script or
    notebook, `for_import`, which says the same.

    Raises:
        SystemExit: 2, for a command.
        ImportError: `for_import`, for an import.
    """
    if _sys.argv[:1] != ["-m"]:
        raise for_import
    if "--json" in _sys.argv[1:]:
        print(_json.dumps({"error": message, "error_code": _ErrorCode.USAGE,
                           "exit_code": int(_ErrorCode.USAGE.exit_code)}), flush=True)
    else:
        print(_error_line(_ErrorCode.USAGE, message), file=_sys.stderr, flush=True)
    raise SystemExit(int(_ErrorCode.USAGE.exit_code))


def _refuse_shadowed_nodes() -> None:
    """Refuses to start under a `nodes` that is not ours: exit 2 (`usage`), not a traceback.

    In the shapes of `_refuse_to_start`: a command names the console script, an import
    (a script, a notebook, pytest collecting a test module) names renaming the folder.
    A `graph.py` or `graph/` that hides ours is never seen here (this module does not
    run then): the pytest plugin (`mandapi_resume_pytest`) and the notebook's first
    cell say so instead.

    Raises:
        SystemExit: 2, for a command.
        ImportError: For an import.
    """
    shadow = _shadowing_nodes()
    if shadow is None:
        return
    message = (f"{shadow} hides this project's nodes package: Python finds that folder's own "
               "nodes first (the current folder comes first for python -m). Run the command "
               "from another folder, or use the console script (mandapi-resume run ...), "
               "which does not look in the current folder")
    for_import = (f"{shadow} hides mandapi-resume's nodes package: Python finds that folder's own "
                  "nodes first (a script's folder, a notebook's, the current one for python -c). "
                  "Rename yours (my_nodes), or import graph from a script or notebook in another "
                  "folder; for the commands, the console script (mandapi-resume run ...) is not "
                  "affected")
    _refuse_to_start(message, ImportError(for_import, name="nodes", path=shadow))


_CORE = ("langgraph", "httpx")
"""Base-install packages every command needs, checked by name, not imported (about 0.2 ms):
langgraph brings langchain-core, pydantic and typing-extensions, so a Python that has it has
those too; one that lacks a dependency only partly is caught where the import fails
(`graph.errors.missing_dependency`)."""


def _refuse_missing_dependencies() -> None:
    """Refuses to start on a Python without the project's dependencies: exit 2, not a traceback.

    `python3 -m graph.run` with the system's Python instead of the virtual environment's
    failed with a `ModuleNotFoundError` traceback (exit 1, a bug by the exit-code table).
    Each of `_CORE` is looked up with `importlib.util.find_spec` (nothing is imported);
    the first one missing is reported as `graph.errors.missing_dependency` words it, in
    the shapes of `_refuse_to_start`.

    Raises:
        SystemExit: 2, for a command.
        ImportError: For an import.
    """
    missing = next((name for name in _CORE if _importlib_util.find_spec(name) is None), None)
    if missing is None:
        return
    usage = _missing_dependency(ModuleNotFoundError(f"No module named {missing!r}", name=missing))
    assert usage is not None
    _refuse_to_start(usage.message, ImportError(usage.message, name=missing))


_refuse_shadowed_nodes()
_refuse_missing_dependencies()
