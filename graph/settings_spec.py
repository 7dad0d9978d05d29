"""A thread's fixed settings: built from flags or a tasks line, validated once, checked on resume.

Task, model, attempt maximum, token cap, context limit, workspace, write folder and
checkpoint window are fixed when a thread is created (INVARIANTS I7). `ThreadSpec`
holds what the caller gave for them, whether from `graph.run`'s flags, a `graph.batch`
tasks line, a queued job or a `graph.api` call, and every bound and message lives here
(single values in `graph.settings_values`), so every entry point accepts exactly the same
values and a refusal names the setting as that caller spelled it.
`ThreadSpec.check_against` refuses a resume that names other values than the stored
thread's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from graph.errors import RefusedError, UsageError
from graph.exitcodes import ErrorCode
from graph.settings_values import (
    check_limit,
    check_model_id,
    check_task,
    check_thread_id,
    resolve_folder,
)
from nodes.demo_model import DEMO_MODEL_ID

if TYPE_CHECKING:
    from graph.settings import Settings
    from nodes.state import ThreadState

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
class ThreadSpec:
    """What a caller gives for a thread's fixed settings; valid once constructed.

    Every setting but `thread_id` may be None (not given): a new thread takes the
    default (`new_thread_state`), a resumed one keeps its stored value; given and different
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
        UsageError: On construction, naming the first invalid setting (exit 2).
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

    def new_thread_state(self, settings: Settings, created_at: str) -> ThreadState:
        """The input that creates the thread: defaults filled in, folders made absolute.

        The model is `model`, else `MANDAPI_MODEL_ID` with `--live`, else `offline-demo`.

        Args:
            settings: The invocation's settings (`live`, `env_model`).
            created_at: The creation time, ISO 8601 text (UTC).

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
        from graph.agent_state import initial_state  # the graph's modules: not needed to check flags
        from nodes.state import DEFAULT_CONTEXT_TOKENS, DEFAULT_MAX_ATTEMPTS

        model = self.model or settings.env_model or DEMO_MODEL_ID
        check_paid(model, settings.live, self.source)
        return initial_state(
            thread_id=self.thread_id, task=self.task, model=model,
            max_attempts=self.max_attempts or DEFAULT_MAX_ATTEMPTS, created_at=created_at,
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
        from graph.settings import scrub_key

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
        from nodes.state import DEFAULT_KEEP_CHECKPOINTS

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
