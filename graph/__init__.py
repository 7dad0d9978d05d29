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
