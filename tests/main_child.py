"""Runs several entry points' `main(argv)` one after another in one fresh interpreter.

For tests whose promise needs a process of its own, but not one per command: commands
run as another user (`setpriv`), or a path that must not import LangGraph (checked
against this interpreter's `sys.modules` after its commands ran). Each command's stdout
and stderr are captured at the file-descriptor level, so whatever a library writes is
seen too; an exception escaping `main` is reported as exit 1 with its traceback on
stderr, as the interpreter would report it. The entry point is imported while its
command's output is captured, so import-time output counts as the command's.

  python -m tests.main_child < commands.json

Reads a JSON list of `{"module": "graph.history", "argv": [...], "env": {...}}` on
stdin (`env`: variables set for that command only). Writes one JSON object on the
original stdout: `{"results": [{"code", "stdout", "stderr"}, ...], "modules": [...]}`,
`modules` being the top-level packages imported by the end.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Sequence
from typing import Any


def run_command(module: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Runs `module.main(argv)` with `env` added; returns its exit code, stdout and stderr."""
    saved_env = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    saved_fds = os.dup(1), os.dup(2)
    # In memory: another user's child may have no folder it can write (memfd is Linux's).
    with open(os.memfd_create("stdout"), "w+b") as out, \
            open(os.memfd_create("stderr"), "w+b") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = int(importlib.import_module(module).main(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported as the interpreter reports it
            traceback.print_exc()
            code = 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        out.seek(0)
        err.seek(0)
        return {"code": code, "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")}


def main() -> None:
    """Runs the commands read from stdin; prints the results as one JSON object."""
    commands = json.load(sys.stdin)
    results = [run_command(c["module"], c["argv"], c.get("env", {})) for c in commands]
    modules = sorted({name.split(".")[0] for name in sys.modules})
    print(json.dumps({"results": results, "modules": modules}))


def run_in_one_child(commands: list[dict[str, Any]], env: dict[str, str], *,
                     prefix: Sequence[str] = (), cwd: str | os.PathLike[str] | None = None
                     ) -> dict[str, Any]:
    """Runs `commands` in one fresh `python -m tests.main_child` (after `prefix`, e.g. `setpriv`).

    Returns:
        The child's JSON object (see the module doc). Fails the test when the child
        itself wrote anything outside its commands, or did not end with exit 0.
    """
    done = subprocess.run([*prefix, sys.executable, "-m", "tests.main_child"],
                          input=json.dumps(commands), env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and not done.stderr, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


if __name__ == "__main__":
    main()
