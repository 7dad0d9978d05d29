"""Queue logs without task text: procrastinate's records redacted, our own step records.

Procrastinate logs each job's arguments at INFO ("Starting job
graph.advance_thread[7](fields={'task': ...}, ...)", the outcome line, "Deferred 1 job"
with the arguments in `extra`), and a queued job's arguments hold its task text.
`RedactJobArgs`, attached to the procrastinate loggers that log jobs, rewrites every
record about one of our jobs to show the thread id alone, in the message and in the
structured `extra` (`job`, `jobs`). The records of our own logger, `graph.queue`, carry
structured fields (`action`, `thread_id`, `job_id`, `status`, `exit_code`,
`error_code`, `duration_s`) and never task, conversation or answer text.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = [
    "ADVANCE_TASK",
    "LOGGER",
    "PROCRASTINATE_JOB_LOGGERS",
    "REDACT",
    "RedactJobArgs",
    "log_step",
    "redact_procrastinate",
]

ADVANCE_TASK = "graph.advance_thread"
"""The task name of a queued thread step."""
LOGGER = logging.getLogger("graph.queue")
"""Our workers' own structured records."""
PROCRASTINATE_JOB_LOGGERS = ("procrastinate.worker", "procrastinate.jobs")
"""The procrastinate loggers whose records show job arguments (the worker's own child
logger, `procrastinate.worker.<name>`, is added when a worker starts)."""


def _safe_call(context: dict[str, Any]) -> str:
    kwargs = context.get("task_kwargs") or {}
    return f"{ADVANCE_TASK}[{context.get('id')}](thread_id={kwargs.get('thread_id')!r})"


def _job_contexts(record: logging.LogRecord) -> list[dict[str, Any]]:
    """The job dicts procrastinate put in a record's `extra` (`job`, and `jobs` for deferrals)."""
    found = [getattr(record, "job", None), *(getattr(record, "jobs", None) or [])]
    return [c for c in found if isinstance(c, dict) and c.get("task_name") == ADVANCE_TASK]


class RedactJobArgs(logging.Filter):
    """Shows our jobs as `graph.advance_thread[ID](thread_id='...')` in procrastinate's records.

    A record naming one of our jobs whose arguments it cannot find in its `extra` (the
    shutdown line "Waiting for job to finish") keeps its message only up to the job's
    id. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrites `record` in place; always True."""
        message = record.getMessage()
        for context in _job_contexts(record):
            safe = _safe_call(context)
            if isinstance(context.get("call_string"), str):
                message = message.replace(context["call_string"], safe)
            context["call_string"] = safe
            context["task_kwargs"] = {"thread_id": (context.get("task_kwargs") or {}).get("thread_id")}
        start = message.find(ADVANCE_TASK + "[")
        while start != -1:
            close = message.find("]", start)
            if close == -1:
                message = message[:start] + ADVANCE_TASK + "[…]"
                break
            rest = message[close + 1:]
            if rest.startswith("(") and not rest.startswith("(thread_id="):
                message = message[:close + 1] + "(…)"
                break
            start = message.find(ADVANCE_TASK + "[", close)
        record.msg, record.args = message, ()
        return True


REDACT = RedactJobArgs()
"""The one filter instance (adding it twice to a logger adds it once)."""


def redact_procrastinate(worker_name: str | None = None) -> None:
    """Attaches `REDACT` to procrastinate's job loggers (and a named worker's own logger)."""
    names = [*PROCRASTINATE_JOB_LOGGERS]
    if worker_name:
        names.append(f"procrastinate.worker.{worker_name}")
    for name in names:
        logging.getLogger(name).addFilter(REDACT)


def log_step(job_id: int | None, result: dict[str, Any], again_s: float | None,
             duration_s: float) -> None:
    """One INFO record of ours per step: what happened to the thread, without any text."""
    LOGGER.info(
        "thread %r: %s, exit %s%s%s", result["thread_id"], result["status"] or "not run",
        result["exit_code"], f" ({result['error_code']})" if result["error_code"] else "",
        "; next step queued" if again_s is not None else "; job chain ends",
        extra={"action": "thread_step", "job_id": job_id, "thread_id": result["thread_id"],
               "status": result["status"], "attempts": result["attempts"],
               "exit_code": result["exit_code"], "error_code": result["error_code"],
               "next_step_queued": again_s is not None, "duration_s": round(duration_s, 3)})
