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

Where an attempt gets counted: the budget node (`nodes/budget.py`) counts it in the
attempt ledger (`graph.store.base.Ledger`; SQL: `graph.store.sql.ledger`, Redis:
`graph.store.redis.ledger`) before the reason node (`nodes/reason.py`) claims it and only
then sends its request. Where a second writer is stopped: `WriterLocks.hold` takes the
thread's writer lock for the whole step, and `WriterLocks.fence` (`graph.store.base`),
the one fencing hook every write of ours and every checkpoint write goes through,
refuses a writer that no longer holds it.

Nothing is compiled or opened at import time: `graph.agent.build_graph` compiles the
graph for a given checkpointer, and `graph.store.open_store` opens a database.
"""

import importlib.util as _importlib_util
import json as _json
import sys as _sys
from pathlib import Path as _Path

from graph.errors import ErrorCode as _ErrorCode
from graph.errors import error_line as _error_line

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


def _refuse_shadowed_nodes() -> None:
    """Refuses to start under a `nodes` that is not ours: exit 2 (`usage`), not a traceback.

    For a command (`python -m graph.X`, found while `sys.argv[0]` is still `-m`) one
    `error (usage): ...` line on stderr, or with `--json` one JSON object on stdout
    (`error`, `error_code`, `exit_code`), then exit 2. For an import from a script or
    notebook, an `ImportError` that says the same.

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
    if _sys.argv[:1] != ["-m"]:
        raise ImportError(message, name="nodes", path=shadow)
    if "--json" in _sys.argv[1:]:
        print(_json.dumps({"error": message, "error_code": _ErrorCode.USAGE,
                           "exit_code": int(_ErrorCode.USAGE.exit_code)}), flush=True)
    else:
        print(_error_line(_ErrorCode.USAGE, message), file=_sys.stderr, flush=True)
    raise SystemExit(int(_ErrorCode.USAGE.exit_code))


_refuse_shadowed_nodes()
