"""A caller's input, checked in one place: single values, a thread's fixed settings, run settings.

- Value checks (`check_flag`, `check_whole`, `check_text`, `check_seconds`,
  `check_path`, `check_names`, `check_thread_id`, ...) are shared by the flags, a tasks
  line and the Python API. Each refusal is a `UsageError` (exit 2) naming the setting as
  its caller spelled it. The type checks are for Python callers (`graph.api`), whose
  values arrive with any type: they are strict on purpose (a flag takes only a bool, a
  whole number only an int, seconds an int or a float, a path also an `os.PathLike`).
- `ThreadSpec`: a thread's fixed settings (task, model, attempt maximum, token cap,
  context limit, workspace, write folder, checkpoint window), fixed when the thread is
  created (INVARIANTS I7), built from `graph.run`'s flags, a `graph.batch` tasks line, a
  queued job or a `graph.api` call; `ThreadSpec.check_against` refuses a resume that
  names other values than the stored thread's.
- `resolve_settings`: run settings, resolved command-line flag, then environment, then
  default. Nodes never read the environment; they get what this module resolved through
  the runtime context.
"""

from __future__ import annotations

import ipaddress
import os
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from graph.errors import ErrorCode, RefusedError, UsageError
from nodes.demo_model import DEMO_MODEL_ID
from nodes.mandapi_defaults import DEFAULT_BASE_URL
from nodes.redaction import MIN_KEY_CHARS, key_to_scrub
from nodes.state import DEFAULT_CONTEXT_TOKENS, DEFAULT_KEEP_CHECKPOINTS, DEFAULT_MAX_ATTEMPTS

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "DEFAULT_TIMEOUT_S",
    "FIELDS",
    "KEEP_ALL",
    "LIMITS",
    "MAX_TIMEOUT_S",
    "MODEL_ID_RE",
    "NewThread",
    "Settings",
    "Source",
    "THREAD_ID_RE",
    "TRACE_KEYS",
    "ThreadSpec",
    "check_db_flag",
    "check_flag",
    "check_limit",
    "check_model_id",
    "check_names",
    "check_paid",
    "check_path",
    "check_seconds",
    "check_task",
    "check_text",
    "InvalidThreadId",
    "check_thread_id",
    "check_trace",
    "check_whole",
    "database_location",
    "env_db",
    "exact",
    "live_name",
    "parse_seconds",
    "resolve_folder",
    "resolve_settings",
    "scrub_key",
    "setting_name",
    "shown",
]

THREAD_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MODEL_ID_RE = re.compile(r"[\x21-\x7e]{1,200}")
"""API keys and model ids: 1-200 printable ASCII characters, no spaces."""


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 40


def shown(value: object) -> str:
    """`value` as a refusal shows it: its repr, cut to about 40 characters.

    `reprlib` also stands in for an object whose own `repr` raises.
    """
    return _SHOWN.repr(value)


def exact(value: object) -> object:
    """`value` as its exact built-in type, when it is a subclass of str, int or float.

    A list or tuple has its items converted the same way (a new list or tuple when one
    changed); anything else is returned as it is. bool cannot be subclassed.

    Returns:
        `str.__str__(value)`, `int.__int__(value)` or `float.__float__(value)` for a
        subclass: the stored value, whatever the subclass's `__str__`, `__index__`,
        `__eq__` or `__hash__` say (an attacker's `str` splitting one thread in two).
    """
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, list | tuple):
        items = [exact(item) for item in value]
        if any(a is not b for a, b in zip(items, value, strict=True)):
            return items if isinstance(value, list) else tuple(items)
    return value


def _refuse(name: str, what: str, value: object) -> UsageError:
    return UsageError(f"{name} must be {what}, not {shown(value)}")


def check_flag(value: object, name: str) -> bool:
    """Returns `value` if it is True or False (not 1, not "yes").

    Raises:
        UsageError: Otherwise (exit 2): `once must be True or False, not 'yes'`.
    """
    if not isinstance(value, bool):
        raise _refuse(name, "True or False", value)
    return value


def check_whole(value: object, name: str, what: str = "a whole number") -> int | None:
    """Returns `value` if it is an int (not a bool, float or text; None passes).

    The range is the caller's to check (`check_limit`).

    Raises:
        UsageError: Otherwise (exit 2), saying `name` must be `what`.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _refuse(name, what, value)
    return int.__int__(value)


def check_text(value: object, name: str, *, optional: bool = True) -> str | None:
    """Returns `value` if it is a str (None passes when `optional`).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _refuse(name, "text (a str)", value)
    return str.__str__(value)


def check_seconds(value: object, name: str) -> float | None:
    """Returns `value` if it is an int or a float (not a bool or text; None passes).

    The range is the caller's to check (`graph.settings.resolve_settings`).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(name, "a number of seconds (an int or a float)", value)
    return int.__int__(value) if isinstance(value, int) else float.__float__(value)


def check_path(value: object, name: str,
               what: str = "a path or a postgresql:// URL") -> str | None:
    """`value` as text: a str, or an `os.PathLike` (`pathlib.Path`) converted with `os.fspath`.

    None passes. A path of bytes is refused: paths and URLs are text here.

    Raises:
        UsageError: Otherwise (exit 2), saying `name` must be `what`.
    """
    if value is None or isinstance(value, str):
        return None if value is None else str.__str__(value)
    if isinstance(value, os.PathLike):
        try:
            path = os.fspath(value)
        except TypeError:  # __fspath__ returned neither str nor bytes
            path = None
        if isinstance(path, str):
            return str.__str__(path)
    raise _refuse(name, f"{what} (a str or os.PathLike)", value)


def check_names(value: object, name: str, what: str = "call ids") -> tuple[str, ...]:
    """`value` as a tuple, if it is a list or tuple of str (a bare str is refused).

    Raises:
        UsageError: Otherwise (exit 2).
    """
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return tuple(str.__str__(item) for item in value)
    raise _refuse(name, f"a list or tuple of {what} (str)", value)


class InvalidThreadId(UsageError):
    """A thread id `check_thread_id` refuses (`usage`, exit 2, as any `UsageError`).

    Its own type so that a caller that built a `ThreadSpec` knows, from the one check,
    whether the thread id it reports with another refusal is a valid one (`graph.run`).
    """


def check_thread_id(thread_id: str, name: str = "thread_id") -> str:
    """Returns `thread_id` if it is 1-128 of letters, digits, `.`, `_`, `:`, `-`.

    The one check of a thread id: `ThreadSpec` calls it for every thread a caller
    names, once per invocation.

    Raises:
        InvalidThreadId: Otherwise (a `UsageError`, exit 2); a value that is no str is
            named as `name`.
    """
    try:
        thread_id = check_text(thread_id, name, optional=False)  # type: ignore[assignment]
    except UsageError as exc:
        raise InvalidThreadId(exc.detail, error_code=exc.error_code) from None
    if not THREAD_ID_RE.fullmatch(thread_id):
        raise InvalidThreadId(
            f"invalid thread id {thread_id[:40]!r}: use 1-128 letters, digits, '.', '_', ':' or '-'"
        )
    return thread_id


def check_task(task: str | None, name: str = "--task") -> str | None:
    """Returns `task` if it is non-blank, valid Unicode text (None passes).

    Raises:
        UsageError: Blank, or holding lone surrogates that are not UTF-8 (exit 2).
    """
    if task is None:
        return None
    try:
        task.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{name} must be valid UTF-8 text") from None
    if not task.strip():
        raise UsageError(f"{name} must not be blank")
    return task


def check_model_id(model: str | None, source: str) -> str | None:
    """Returns `model` if it is 1-200 printable ASCII characters without spaces (None passes).

    A near miss of the demo model (`offline_demo`, `Offline-Demo`) is a typo, not a
    paid model: it is refused with the right spelling.

    Raises:
        UsageError: Otherwise (exit 2), naming `source` (a flag, field or variable).
    """
    if model is not None and not MODEL_ID_RE.fullmatch(model):
        raise UsageError(f"{source} must be 1-200 printable ASCII characters without spaces")
    if model is not None and model != DEMO_MODEL_ID and _folded(model) == _folded(DEMO_MODEL_ID):
        raise UsageError(f"{source} {model!r} is not a model: did you mean {DEMO_MODEL_ID}?")
    return model


def _folded(name: str) -> str:
    return re.sub(r"[\W_]", "", name).lower()


def check_limit(value: int | None, limit: int, name: str) -> None:
    """Checks an integer setting: from 1 to `limit` (None passes).

    Raises:
        UsageError: Naming the setting `name` and the bound (exit 2).
    """
    if value is not None and value < 1:
        raise UsageError(f"{name} must be a positive integer")
    if value is not None and value > limit:
        raise UsageError(f"{name} must be at most {limit}")


def resolve_folder(folder: str | None, name: str = "workspace") -> str | None:
    """The absolute path of an existing folder (`--workspace`, `--allow-writes`), or None.

    Raises:
        UsageError: `no_such_workspace` when the folder is missing here, or the path
            names something that is not a folder (exit 2, nothing counted): a step reads
            the folder on the machine that runs it; `usage` when its path is not valid
            UTF-8 (a stored path must name the same folder when read back).
    """
    if folder is None:
        return None
    try:
        path = Path(folder).expanduser().resolve()
        found, exists = path.is_dir(), path.exists()
    except (OSError, ValueError, RuntimeError):  # too long, a NUL byte, a symlink loop
        found = exists = False
    if not found:
        raise UsageError(f"{name} {folder} exists but is not a folder"
                         if exists else f"{name} folder {folder} does not exist on this machine",
                         error_code=ErrorCode.NO_SUCH_WORKSPACE)
    try:  # stored as text (PostgreSQL and JSON hold no undecodable bytes): refuse, not mangle
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{name} folder {folder!r} has a name that is not valid UTF-8: rename it "
                         "or give another folder") from None
    return str(path)


LIMITS: dict[str, int] = {"max_attempts": 1_000_000, "max_tokens": 10**12,
                          "context_tokens": 10_000_000, "keep_checkpoints": 1_000_000}
"""Largest accepted value of each integer setting (the smallest is 1)."""
KEEP_ALL = "all"
"""`--keep-checkpoints all`: keep every checkpoint (LangGraph's full time travel)."""
FIELDS: dict[str, type] = {"thread_id": str, "task": str, "model": str, "max_attempts": int,
                           "max_tokens": int, "context_tokens": int, "workspace": str,
                           "allow_writes": str, "keep_checkpoints": int}
"""The settings a tasks line may carry, named as `graph.run`'s flags (`max_attempts`:
`--max-attempts`)."""

Source = Literal["flags", "line", "keywords"]
"""Where a spec's values came from, which decides how a refusal names a setting: `flags`
(`graph.run`: `--max-attempts`), `line` (a tasks line or queued job, run by `graph.batch`
or a worker: `max_attempts`, and `--live` for the batch's flag) or `keywords` (a Python
caller of `graph.api`: `max_attempts`, `live=True`)."""


def setting_name(key: str, source: Source) -> str:
    """How a message names setting `key`: `--max-attempts` for flags, else `max_attempts`."""
    return "--" + key.replace("_", "-") if source == "flags" else key


def live_name(source: Source) -> str:
    """How a message names the switch that allows paid requests: `live=True` or `--live`."""
    return "live=True" if source == "keywords" else "--live"


def check_paid(model: str | None, live: bool, source: Source = "flags") -> None:
    """Refuses a model that makes paid requests without `--live` (None passes).

    Args:
        model: The model id, or None (not given).
        live: Whether paid requests are allowed.
        source: How the message names the switch (`live_name`).

    Raises:
        UsageError: A model other than `offline-demo` while `live` is false (exit 2).
    """
    if model not in (None, DEMO_MODEL_ID) and not live:
        allow = ("open the database with live=True" if source == "keywords"
                 else f"add {live_name(source)}")
        raise UsageError(f"model {model!r} makes paid requests: {allow} to allow them")


@dataclass(frozen=True)
class NewThread:
    """A new thread's fixed settings, checked and resolved (`ThreadSpec.new_thread`).

    What `graph.agent.first_state` builds the thread's first state from.

    Attributes:
        thread_id: The thread's id.
        task: The task text.
        model: The model id (a paid one only with `live`).
        max_attempts: Model requests allowed.
        workspace: The read-only tools' folder, absolute, or None.
        max_tokens: Cap on the tokens the thread may use, or None.
        context_tokens: Estimated tokens per request before compaction.
        allow_writes: The write tools' folder, absolute, or None.
        keep_checkpoints: How many latest checkpoints the thread keeps; None keeps all.
    """

    thread_id: str
    task: str
    model: str
    max_attempts: int
    workspace: str | None
    max_tokens: int | None
    context_tokens: int
    allow_writes: str | None
    keep_checkpoints: int | None


@dataclass(frozen=True)
class ThreadSpec:
    """What a caller gives for a thread's fixed settings; valid once constructed.

    Every setting but `thread_id` may be None (not given): a new thread takes the
    default (`new_thread`), a resumed one keeps its stored value; given and different
    from the stored value, it is refused (`check_against`).

    Attributes:
        thread_id: 1-128 of letters, digits, `.`, `_`, `:`, `-`.
        task: Non-blank text; required to create a thread.
        model: Model id, 1-200 printable ASCII characters.
        max_attempts: Model requests allowed (attempts), 1 to `LIMITS["max_attempts"]`.
        max_tokens: Cap on the tokens MandAPI reports for the thread, 1 to 10^12.
        context_tokens: Estimated tokens per request before compaction, 1 to 10^7.
        workspace: Folder of the read-only tools, as given (resolved when used).
        allow_writes: Folder of the write tools, as given (resolved when used).
        keep_checkpoints: How many latest checkpoints the thread keeps, 1 to 10^6, or
            `"all"` (`KEEP_ALL`).
        source: `flags`, `line` or `keywords`: how a refusal names a setting
            (`setting_name`); not compared and not one of the thread's settings.

    Raises:
        UsageError: On construction, naming the first invalid setting (exit 2). The
            order is each source's, pinned by tests/cli/test_check_once.py: from the
            flags (`graph.run`) the thread id first (`InvalidThreadId`), so a command
            reports a bad `--thread` before anything else; from a tasks line or
            keywords each setting's type and range first, then the thread id, the
            task and the model.
    """

    thread_id: str
    task: str | None = None
    model: str | None = None
    max_attempts: int | None = None
    max_tokens: int | None = None
    context_tokens: int | None = None
    workspace: str | None = None
    allow_writes: str | None = None
    keep_checkpoints: int | str | None = None
    source: Source = field(default="flags", compare=False, repr=False)

    def __post_init__(self) -> None:
        source = self.source
        if source == "flags":
            check_thread_id(self.thread_id)
        for key, kind in FIELDS.items():
            value, name = getattr(self, key), setting_name(key, source)
            if key == "keep_checkpoints" and value == KEEP_ALL:
                continue
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise UsageError(f"{name} must be a "
                                 f"{'positive integer' if kind is int else 'string'}"
                                 + (f" or {KEEP_ALL!r}" if key == "keep_checkpoints" else ""))
        for key, limit in LIMITS.items():
            if getattr(self, key) != KEEP_ALL:
                check_limit(getattr(self, key), limit, setting_name(key, source))
        if source != "flags":
            check_thread_id(self.thread_id)
        check_task(self.task, setting_name("task", source))
        check_model_id(self.model, setting_name("model", source))

    @classmethod
    def from_line(cls, data: Mapping[str, Any], *, live: bool) -> ThreadSpec:
        """The spec of one tasks line or queued job, with everything checked up front.

        Beyond construction: no unknown fields, `thread_id` and `task` present, a paid
        model only with `live`, and both folders existing here.

        Raises:
            UsageError: Naming the field and what is wrong (exit 2).
        """
        unknown = set(data) - set(FIELDS)
        if unknown:
            raise UsageError(f"unknown field(s) {sorted(unknown)}")
        for key in ("thread_id", "task"):  # required: null is as missing as absent
            if data.get(key) is None:
                raise UsageError(f"{key} is missing")
        spec = cls(**data, source="line")
        check_paid(spec.model, live, "line")
        resolve_folder(spec.workspace, "workspace")
        resolve_folder(spec.allow_writes, "allow_writes")
        return spec

    def to_fields(self) -> dict[str, Any]:
        """The given settings as tasks-line fields (what a queued job carries)."""
        return {key: getattr(self, key) for key in FIELDS if getattr(self, key) is not None}

    def new_thread(self, settings: Settings) -> NewThread:
        """The settings that create the thread: checked, defaults filled in, folders absolute.

        The model is `model`, else `MANDAPI_MODEL_ID` with `--live`, else `offline-demo`.
        Building the thread's first state from them is `graph.agent.first_state`'s.

        Args:
            settings: The invocation's settings (`live`, `env_model`).

        Raises:
            UsageError: No task; a task holding the configured API key (nothing is
                stored: INVARIANTS I9); `--live` without a model; a paid model without
                `--live`; a missing folder (`no_such_workspace`).
        """
        if self.task is None:
            raise UsageError("a new thread needs a task", thread_id=self.thread_id)
        self.check_no_key(settings)
        if settings.live and not (self.model or settings.env_model):
            raise UsageError(f"{live_name(self.source)} needs a model for a new thread: "
                             f"{self._name('model')} or MANDAPI_MODEL_ID")
        model = self.model or settings.env_model or DEMO_MODEL_ID
        check_paid(model, settings.live, self.source)
        return NewThread(
            thread_id=self.thread_id, task=self.task, model=model,
            max_attempts=self.max_attempts or DEFAULT_MAX_ATTEMPTS,
            workspace=resolve_folder(self.workspace), max_tokens=self.max_tokens,
            context_tokens=self.context_tokens or DEFAULT_CONTEXT_TOKENS,
            allow_writes=resolve_folder(self.allow_writes, self._folder("allow_writes")),
            keep_checkpoints=self.window)

    def check_no_key(self, settings: Settings) -> None:
        """Refuses a task, thread id or folder that contains the API key (each is stored).

        The key is `--live`'s, or `MANDAPI_API_KEY` whenever it is set (`scrub_key`).

        Raises:
            UsageError: Naming the setting, never the key (exit 2; nothing stored: I9).
        """
        key = scrub_key(settings)
        if not key:
            return
        for name, text in (("task", self.task), ("thread_id", self.thread_id),
                           ("workspace", self.workspace), ("allow_writes", self.allow_writes)):
            if text and key in text:
                shown = "--thread" if name == "thread_id" and self.source != "keywords" else \
                    self._name(name)
                raise UsageError(f"{shown} contains the API key (MANDAPI_API_KEY): "
                                 "it would be stored and shown; remove the key from it")

    @property
    def window(self) -> int | None:
        """The checkpoints a new thread keeps: the given number, None for `all`, else the default."""
        if self.keep_checkpoints == KEEP_ALL:
            return None
        return int(self.keep_checkpoints or DEFAULT_KEEP_CHECKPOINTS)

    def check_against(self, thread: Mapping[str, Any], env_model: str | None) -> None:
        """Refuses settings that differ from the stored thread's (`thread` state channel).

        A given folder is compared as an absolute path. `env_model` is
        `MANDAPI_MODEL_ID` (with `--live`), compared when no model is given.

        Raises:
            RefusedError: `identity_mismatch`, naming the setting (exit 4).
            UsageError: `no_such_workspace` when a given folder is missing.
        """
        fixed = (("max_attempts", self.max_attempts), ("max_tokens", self.max_tokens),
                 ("context_tokens", self.context_tokens),
                 ("workspace", resolve_folder(self.workspace or None)),
                 ("allow_writes", resolve_folder(self.allow_writes or None,
                                                 self._folder("allow_writes"))))
        if self.keep_checkpoints is not None and self.window != thread["keep_checkpoints"]:
            stored = thread["keep_checkpoints"] or KEEP_ALL
            raise self._mismatch(f"created with {self._name('keep_checkpoints')} {stored}; it is "
                                 f"fixed at creation and cannot become {self.keep_checkpoints}")
        for key, given in fixed:
            if given is not None and given != thread[key]:
                raise self._mismatch(f"created with {self._name(key)} {thread[key]}; it is fixed "
                                     f"at creation and cannot become {given}")
        if self.task is not None and self.task != thread["task"]:
            raise self._mismatch(f"created with a different task; omit {self._name('task')} "
                                 "to resume it")
        source, model = (self._name("model"), self.model) if self.model is not None else (
            "MANDAPI_MODEL_ID", env_model)
        if model is not None and model != thread["model"]:
            raise self._mismatch(f"uses model {thread['model']!r}, but {source} is {model!r}")

    def _name(self, key: str) -> str:
        """A setting in a creation or resume refusal: the flag, or the keyword from Python.

        A tasks line's thread is run by `graph.batch` or a worker, so its refusals keep
        naming `graph.run`'s flags, as they always have.
        """
        return setting_name(key, "keywords" if self.source == "keywords" else "flags")

    def _folder(self, key: str) -> str:
        """A folder setting in a missing-folder refusal (`allow-writes`, or `allow_writes`)."""
        return self._name(key).removeprefix("--")

    def _mismatch(self, detail: str) -> RefusedError:
        return RefusedError(detail, error_code=ErrorCode.IDENTITY_MISMATCH,
                            thread_id=self.thread_id)


DB_ENV = "GRAPH_DB"
"""Environment variable naming the checkpoint database when `--db` is not given."""
DEFAULT_DB = "checkpoints.sqlite"
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0

_SECONDS_RE = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?|\.[0-9]{1,9}")
"""A number of seconds as a person writes it: ASCII digits with an optional fraction."""


TRACE_KEYS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")
"""Environment variables LangSmith reads its key from; `--trace` needs one of them."""


def check_trace(env: Mapping[str, str]) -> None:
    """Refuses `--trace` when LangSmith has no key to upload with.

    Raises:
        UsageError: None of `TRACE_KEYS` is set (exit 2, before anything is counted).
    """
    if not any(env.get(name) for name in TRACE_KEYS):
        raise UsageError("--trace uploads the run to LangSmith and needs LANGSMITH_API_KEY in "
                         "the environment")


def parse_seconds(text: str, name: str) -> float:
    """`text` as a number of seconds, written with ASCII digits and at most one `.`.

    Python's `float()` also takes `1_0`, ` 5`, `+5`, `1e3`, `inf`, `nan` and other
    scripts' digits; a timeout takes only what a person means by a number of seconds,
    like the whole-number flags (`graph.cli.whole_number`). The range is checked by
    `resolve_settings`.

    Args:
        text: The value as given.
        name: The flag or variable, for the message (`--timeout`, `MANDAPI_TIMEOUT`).

    Raises:
        UsageError: Anything else (exit 2).
    """
    if not _SECONDS_RE.fullmatch(text):
        raise UsageError(f"{name} must be a timeout in seconds such as 30 or 2.5, "
                         f"not {text[:40]!r}")
    return float(text)


def check_db_flag(flag: str | None, name: str = "--db") -> str | None:
    """`flag` unless it was given empty (None: not given).

    An empty `--db` (an unset shell variable, `--db "$DB"`) must not silently become
    the default database.

    Args:
        flag: The value given, or None.
        name: The setting, as the caller spelled it: `--db` (a flag), `db` (a keyword of
            `graph.api`), `--from`, `--to`.

    Raises:
        UsageError: `flag` is empty or only spaces (exit 2), naming the setting.
    """
    if flag is not None and not flag.strip():
        default = f"${DB_ENV} or ./{DEFAULT_DB}"
        raise UsageError(f"{name} is empty: give a SQLite file, a postgresql:// or a redis:// URL"
                         + (f", or leave {name} out to use {default}" if name == "--db" else
                            f", or None to use {default}" if name == "db" else ""))
    return flag


def env_db(env: Mapping[str, str] | None = None) -> str | None:
    """`$GRAPH_DB`, or None when it is not set.

    Set but empty or only spaces (`GRAPH_DB=` in a scheduler's environment) is a
    mistake, not "unset", as `MANDAPI_BASE_URL` is: it never silently becomes the default
    database, where the task's checkpoints would not be.

    Raises:
        UsageError: `GRAPH_DB` is set but empty (exit 2).
    """
    value = (os.environ if env is None else env).get(DB_ENV)
    if value is not None and not value.strip():
        raise UsageError(f"{DB_ENV} is set but empty: unset it to use ./{DEFAULT_DB}, or give a "
                         "SQLite file, a postgresql:// or a redis:// URL")
    return value


def database_location(db: str | None, name: str = "--db") -> str:
    """`db`, else `$GRAPH_DB`, else `checkpoints.sqlite`.

    Raises:
        UsageError: `db` was given empty (`check_db_flag`, naming `name`), or `GRAPH_DB`
            is set but empty (`env_db`).
    """
    return check_db_flag(db, name) or env_db() or DEFAULT_DB


def _check_base_url(url: str) -> str:
    """Returns `url` if it is a plain, complete http(s) base URL.

    Parsed with `urllib.parse` and checked whole before anything is counted: scheme
    http or https, a valid host (a name, an IPv4 address or a bracketed IPv6 address),
    a port from 1 to 65535 when given, and no credentials, query, fragment or spaces.

    Raises:
        UsageError: Naming what is wrong (exit 2).
    """
    def bad(why: str) -> UsageError:
        return UsageError(f"MANDAPI_BASE_URL {url[:80]!r} is not usable: {why}")

    if any(c.isspace() or not c.isprintable() for c in url) or not url.isascii():
        raise bad("it must be printable ASCII without spaces")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme not in ("http", "https"):
        raise bad("it must start with http:// or https://")
    if "@" in parts.netloc:
        raise UsageError("MANDAPI_BASE_URL must not carry credentials; the key goes in "
                         "MANDAPI_API_KEY")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise bad("it must not have a query or fragment")
    host = parts.hostname or ""
    if port == 0 or parts.netloc.endswith(":"):
        raise bad("the port must be 1 to 65535")
    if parts.netloc.split("]")[-1].count(":") > 1:
        raise bad("the host is malformed")
    if "[" in parts.netloc or "]" in parts.netloc:
        if not re.fullmatch(r"\[[0-9A-Fa-f:.]+\](:[0-9]+)?", parts.netloc):
            raise bad("the host is malformed")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"{host!r} is not an IPv6 address") from None
    elif not _HOST_RE.fullmatch(host):
        raise bad(f"{host!r} is not a host name")
    return url


_HOST_RE = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                      r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?")
"""A DNS name or dotted IPv4 address: labels of letters, digits and inner hyphens."""


@dataclass(frozen=True)
class Settings:
    """Resolved settings of one invocation.

    Attributes:
        db: SQLite path or PostgreSQL URL.
        live: Real MandAPI requests allowed (`--live`).
        api_key: `MANDAPI_API_KEY` (only with `live`); never printed or stored.
        env_model: `MANDAPI_MODEL_ID` (only read with `live`).
        base_url: MandAPI base URL; requests go to `{base_url}/chat/completions`.
        timeout_s: Whole-request timeout for MandAPI (seconds).
        trace: LangSmith tracing for this invocation (`--trace`): the task and the
            conversation are uploaded to LangSmith. Off unless asked for.
    """

    db: str
    live: bool = False
    api_key: str | None = field(default=None, repr=False)
    env_model: str | None = None
    base_url: str = DEFAULT_BASE_URL
    timeout_s: float = DEFAULT_TIMEOUT_S
    trace: bool = False


def resolve_settings(
    *,
    db: str | None,
    live: bool,
    timeout_s: float | None,
    environ: Mapping[str, str] | None = None,
    trace: bool = False,
    source: Source = "flags",
) -> Settings:
    """Resolves settings from flags and the environment.

    `source` says how refusals name a setting: `flags` (`--db`, `--live`) or `keywords`
    (`db`, `live=True`: `graph.api.open_database`).

    Raises:
        UsageError: `--live` without a usable `MANDAPI_API_KEY` (printable ASCII, at
            least `nodes.redaction.MIN_KEY_CHARS` characters), a
            timeout outside (0, 3600] seconds or not written as plain digits, a base
            URL that is not plain http(s) without credentials, a malformed
            `MANDAPI_MODEL_ID`, an empty `--db`, or `--trace` without a LangSmith key
            (`check_trace`). All are checked before anything is counted.
    """
    env = os.environ if environ is None else environ
    check_db_flag(db, setting_name("db", source))
    if trace:
        check_trace(env)
    api_key = env.get("MANDAPI_API_KEY") or None
    if live and not api_key:
        raise UsageError(f"{live_name(source)} needs MANDAPI_API_KEY in the environment")
    if live and not MODEL_ID_RE.fullmatch(api_key or ""):
        raise UsageError("MANDAPI_API_KEY must be printable ASCII without spaces")
    if live and len(api_key or "") < MIN_KEY_CHARS:
        raise UsageError(f"MANDAPI_API_KEY is {len(api_key or '')} characters long; a real key "
                         f"has at least {MIN_KEY_CHARS}, and a shorter one could not be told "
                         "apart from ordinary text to redact it: check the variable")
    if timeout_s is None:
        raw = env.get("MANDAPI_TIMEOUT")
        timeout_s = parse_seconds(raw, "MANDAPI_TIMEOUT") if raw else DEFAULT_TIMEOUT_S
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(f"the timeout must be more than 0 and at most {MAX_TIMEOUT_S:.0f} seconds")
    raw_base = env.get("MANDAPI_BASE_URL")
    if raw_base is not None and not raw_base.strip():  # set but empty: a mistake, not "unset"
        raise UsageError("MANDAPI_BASE_URL is set but empty: unset it to use "
                         f"{DEFAULT_BASE_URL}, or give a plain http(s):// URL")
    base_url = _check_base_url(raw_base or DEFAULT_BASE_URL)
    env_model = check_model_id(env.get("MANDAPI_MODEL_ID") or None, "MANDAPI_MODEL_ID")
    return Settings(
        db=db or env_db(env) or DEFAULT_DB,
        live=live,
        api_key=api_key if live else None,
        env_model=env_model if live else None,
        base_url=base_url,
        timeout_s=timeout_s,
        trace=trace,
    )


def scrub_key(settings: Settings) -> str | None:
    """The API key no stored or printed text may hold (INVARIANTS I9), or None.

    The key of `--live`, else `MANDAPI_API_KEY` when it is set and could be a key
    (`nodes.redaction.key_to_scrub`): an offline run never sends it, but a workspace
    file, a task or a folder name may still spell it.
    """
    return settings.api_key or key_to_scrub(os.environ.get("MANDAPI_API_KEY"))
