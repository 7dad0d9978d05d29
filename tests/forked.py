"""`python -m ENTRY ARGV` as a real process that starts in milliseconds.

A child of a `multiprocessing` forkserver that has already imported the project (as
`tests/crash_child.py`'s are) runs the entry point's module as `__main__`, as `python -m`
does: `main(argv)` under the module's own `__main__` block. That block ends the process
with `os._exit(code)` (`graph.run`), or with `sys.exit(code)`, after which the child does
what the interpreter does at its exit: waits for non-daemon threads, runs the `atexit`
callbacks, flushes both streams. It has its own pid, environment, working folder, stdout
and stderr, and takes real signals. What it does not repeat is the interpreter's start
and the imports, which cost more than a step; tests about those (a closed pipe from the
start, the console script, what a path imports) start a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import runpy
import signal
import subprocess
import sys
import threading
import warnings
from multiprocessing.context import ForkServerContext
from pathlib import Path

from tests.crash_child import PRELOAD


def forkserver() -> ForkServerContext:
    """The forkserver context (one server per test process, started on first use)."""
    ctx = multiprocessing.get_context("forkserver")
    # procrastinate's command and our queue app's modules, for the queue workers
    # (tests/fleet/test_queue.py); not `graph.queue`, which builds its app from the
    # environment when imported.
    ctx.set_forkserver_preload([*PRELOAD, "graph.batch", "tests.forked", "procrastinate.cli",
                                "procrastinate.worker", "graph.fleet.jobs", "graph.fleet.worker"])
    return ctx


def _run_as_main(entry: str, argv: list[str], env: dict[str, str], cwd: str, out_path: str,
                 err_path: str) -> None:
    """Process target: `python -m entry argv` with stdout and stderr in the two files."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for path, target in ((out_path, 1), (err_path, 2)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = [entry, *argv]
    # `python -m` imports the entry afresh; here the forkserver already has it (preloaded),
    # about which runpy warns on stderr, which a fresh `python -m` never prints.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy",
                            message=f"'{re.escape(entry)}' found in sys.modules")
    try:
        runpy.run_module(entry, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    # The interpreter's own exit, which multiprocessing would otherwise replace by its own.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class ForkedProcess:
    """`python -m entry argv` forked from `forkserver()`, with what tests use of `Popen`.

    Args:
        ctx: `forkserver()`.
        entry: The module run as `__main__` (`graph.run`, `graph.batch`, ...).
        argv: Its arguments.
        env: Its whole environment.
        cwd: Its working folder; its stdout and stderr are kept in files here, named
            after its pid.
    """

    def __init__(self, ctx: ForkServerContext, entry: str, argv: list[str], env: dict[str, str],
                 cwd: Path) -> None:
        self.args = [entry, *argv]
        self._files = [cwd / f".forked-{os.getpid()}-{id(self)}.{name}" for name in ("out", "err")]
        self._process = ctx.Process(target=_run_as_main, args=(
            entry, argv, env, str(cwd), *(str(f) for f in self._files)))
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the process has ended, else None (as `Popen.poll`)."""
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        """Sends `sig` to the process (unless it already ended)."""
        if self.returncode is None and self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        """Sends SIGTERM (as `Popen.terminate`)."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Sends SIGKILL (as `Popen.kill`)."""
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the end and returns its exit code (as `Popen.wait`); keeps its output.

        Raises:
            subprocess.TimeoutExpired: Still running after `timeout` seconds.
        """
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.returncode = self._process.exitcode
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Waits for the end; returns its (stdout, stderr) and sets `returncode`.

        Raises:
            subprocess.TimeoutExpired: Still running after `timeout` seconds.
        """
        self.wait(timeout)
        out, err = (f.read_text() for f in self._files)
        for f in self._files:
            f.unlink()
        return out, err
