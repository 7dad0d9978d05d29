"""Runs the current graph against a recording, with no network: the engine of `mandapi_replay`.

The thread is created anew, from the recording's settings, in a database of the
caller's (a fresh SQLite file by default) and advanced by real `graph.run` invocations
(`--live --once`), each making its one request through the real MandAPI client
(`nodes.mandapi.MandApiModel`) over an httpx `MockTransport` whose handler refuses
the network. vcrpy, with the recording as its cassette (`record_mode="none"`, never
rewritten), intercepts that transport and answers each request from the recording:

- strictly in order: a request matches only the next unplayed exchange, compared as
  `match` says (`graph.replay.diff`: `exact`, or `messages_and_tools`); a difference
  fails at once with a readable diff, and so does a request past the last exchange;
- an exchange recorded without an answer raises its httpx error (timeout, connection);
- paused write calls are decided as recorded (by turn and call id), writes applied
  for real in the `allow_writes` folder given;
- a thread stopped by a model error no rerun can fix (`model_not_found`, ...) that the
  recording shows going on (exchanges left, or a recorded `ready` end) was reopened by a
  person (`--reopen`, the only way on): it is reopened here too, at the same point;
- at the end, every exchange must have been played, the ledger must count exactly one
  attempt per reply (attempts == claimed == replies), and the thread must end as
  recorded (status, answer, usage).

Every failure raises `ReplayFailure` (an `AssertionError`) whose message says what
differs. The environment's MandAPI variables are replaced during the replay (the key
by a dummy), so no real key is ever at hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from graph.api import Database
from graph.errors import ErrorCode, RefusedError, RunError
from graph.replay import format as replay_format
from graph.replay.diff import MODES, compared, difference, outcome_difference
from graph.replay.format import Recording, load_recording
from graph.run import run
from graph.settings import Settings
from graph.step.local_steps import REOPENABLE
from graph.store import open_store
from graph.text import escape_controls
from graph.threads.copy import thread_exists
from nodes.mandapi import MandApiModel

__all__ = ["DUMMY_KEY", "ReplayFailure", "ReplayResult", "replay"]

DUMMY_KEY = "replay-offline-no-key"
_HINT = ("If the change is intended, run the thread again and export it anew "
         "(python -m graph.replay export --thread ID --db DB -o FILE).")


class ReplayFailure(AssertionError):
    """The graph did not do what the recording says; the message says how.

    The message has its control characters escaped (`graph.text`): it quotes
    the recording, and pytest prints it to a terminal.
    """

    def __init__(self, message: str) -> None:
        super().__init__(escape_controls(str(message)))


@dataclass
class ReplayResult:
    """What a replay did.

    Attributes:
        outcomes: Each `graph.run` invocation's `--json` object, in order (decisions too).
        requests: The JSON body of each request the graph sent, in order.
        db: The database the thread was replayed in.
        thread_id: The replayed thread.
    """

    outcomes: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    db: str
    thread_id: str

    @property
    def final(self) -> dict[str, Any]:
        """The last invocation's outcome (`status`, `answer`, `attempts`, `usage`, ...)."""
        return self.outcomes[-1]

    @property
    def status(self) -> str:
        """The thread's status at the end (`done`, `exhausted`, `ready`, `awaiting_approval`)."""
        return str(self.final["status"])

    @property
    def answer(self) -> str | None:
        """The final answer, or None."""
        return self.final.get("answer")


def _body(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


@dataclass
class _Playback:
    """The vcrpy matcher (strict order + comparison) and what the transport needs."""

    recording: Recording
    mode: str
    cassette: Any = None
    current: int | None = None
    failure: str | None = None
    sent: list[Any] = field(default_factory=list)

    def next_index(self) -> int | None:
        return next((i for i in range(len(self.cassette)) if self.cassette.play_counts[i] == 0), None)

    def _difference(self, index: int, method: str, uri: str, body: Any) -> str | None:
        recorded = compared("POST", self.recording.uris[index], self.recording.requests[index], self.mode)
        return difference(recorded, compared(method, uri, body, self.mode))

    def match(self, incoming: Any, stored: Any) -> None:
        """As a vcrpy matcher: `stored` must be the next unplayed exchange, equal to `incoming`."""
        index = self.next_index()
        if index is None or self.cassette.requests[index] is not stored:
            raise AssertionError("not the next recorded exchange")
        if self._difference(index, incoming.method, incoming.uri, _body(incoming.body)):
            raise AssertionError("the request differs")
        self.current = index

    def explain(self, method: str, uri: str, body: Any) -> str:
        """The failure message for a request no exchange answers."""
        total, where = len(self.recording.requests), self.recording.path
        index = self.next_index()
        if index is None:
            last = (body.get("messages") or [{}])[-1] if isinstance(body, dict) else body
            return (f"the recording ran out: the graph sent request {total + 1}, but {where} holds "
                    f"{total}; its last message: {json.dumps(last, ensure_ascii=False)[:300]}\n{_HINT}")
        attempt = self.recording.exchanges[index].get("attempt")
        return (f"request {index + 1} of {total} (attempt {attempt}) differs from {where} "
                f"(match={self.mode}):\n{self._difference(index, method, uri, body)}\n{_HINT}")


class _ReplayTransport(httpx.BaseTransport):
    """Sends through a `MockTransport` that vcrpy answers; raises what the recording says."""

    def __init__(self, playback: _Playback) -> None:
        self._playback = playback
        self._inner = httpx.MockTransport(self._no_network)

    @staticmethod
    def _no_network(request: httpx.Request) -> httpx.Response:
        raise ReplayFailure(f"a request reached the network during a replay: {request.url}")

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        from vcr.errors import CannotOverwriteExistingCassetteException  # noqa: PLC0415 - vcrpy: the replay extra

        playback = self._playback
        body = _body(request.read())
        playback.sent.append(body)
        playback.current = None
        try:
            response = self._inner.handle_request(request)  # vcrpy plays the exchange
        except CannotOverwriteExistingCassetteException:
            playback.failure = playback.explain(request.method, str(request.url), body)
            raise ReplayFailure(playback.failure) from None
        if playback.current is None:  # vcrpy answered without our matcher: never expected
            raise ReplayFailure("vcrpy answered a request that matched no recorded exchange")
        raises = playback.recording.exchanges[playback.current].get("raise")
        if raises == "timeout":
            raise httpx.ReadTimeout("replayed: the recorded request timed out", request=request)
        if raises == "connection":
            raise httpx.ConnectError("replayed: the recorded request got no answer", request=request)
        return response


def _model_factory(playback: _Playback) -> Callable[[str, Any], Any]:
    """Builds the real MandAPI client over the replay transport, whatever the model id."""
    def factory(model_id: str, settings: Any) -> Any:
        client = httpx.Client(timeout=httpx.Timeout(settings.timeout_s),
                              transport=_ReplayTransport(playback), follow_redirects=False)
        return MandApiModel(client, api_key=settings.api_key or DUMMY_KEY, model_id=model_id,
                            base_url=settings.base_url)
    return factory


@contextmanager
def _environment(base_url: str) -> Iterator[None]:
    """MandAPI variables for the replay (a dummy key), restored afterwards."""
    names = ("MANDAPI_API_KEY", "MANDAPI_BASE_URL", "MANDAPI_MODEL_ID", "MANDAPI_TIMEOUT")
    saved = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(MANDAPI_API_KEY=DUMMY_KEY, MANDAPI_BASE_URL=base_url)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _vcr(playback: _Playback) -> Any:
    try:
        import vcr  # noqa: PLC0415 - vcrpy: the replay extra
    except ImportError:
        raise ReplayFailure("replaying needs vcrpy: pip install 'mandapi-resume[replay]'") from None
    player = vcr.VCR(record_mode="none")
    player.register_serializer("mandapi_replay", replay_format)
    player.register_matcher("mandapi_replay_next", playback.match)
    return player


# -- driving the thread through graph.run -------------------------------------------

_FINAL = ("done", "exhausted", "cancelled")


def _folder(kind: str, given: str | Path | None, recorded: str | None) -> list[str]:
    """The `--workspace` / `--allow-writes` flags of the replayed thread."""
    flag = f"--{kind.replace('_', '-')}"
    if recorded is None:
        if given is not None:
            raise ReplayFailure(f"the recorded thread has no {kind} folder; do not pass {kind}=")
        return []
    if given is None and kind == "allow_writes":  # never write into the recorded folder
        raise ReplayFailure("the recorded thread could write: pass allow_writes= with an empty folder")
    folder = Path(given if given is not None else recorded)
    if not folder.is_dir():
        raise ReplayFailure(f"the {kind} folder {folder} does not exist here: pass {kind}= with "
                            + ("the recorded files" if kind == "workspace" else "an empty folder"))
    return [flag, str(folder)]


def _identity_flags(rec: Recording, workspace: str | Path | None,
                   allow_writes: str | Path | None) -> list[str]:
    """The `graph.run` flags that create the recorded thread anew."""
    thread = rec.thread
    keep = thread.get("keep_checkpoints")
    flags = ["--task", str(thread["task"]), "--model", str(thread["model"]),
             "--max-attempts", str(thread["max_attempts"]),
             "--context-tokens", str(thread["context_tokens"]),
             "--keep-checkpoints", "all" if keep is None else str(keep)]
    if thread.get("max_tokens") is not None:
        flags += ["--max-tokens", str(thread["max_tokens"])]
    flags += _folder("workspace", workspace, thread.get("workspace"))
    flags += _folder("allow_writes", allow_writes, thread.get("allow_writes"))
    return flags


def _refuse_existing(db: str, thread_id: str) -> None:
    """Refuses a replay into a database that already holds the recorded thread.

    A replay creates the thread anew; run in a database where it exists, it would
    advance that thread (counting its attempts) and then report a misleading diff.
    Read-only: a missing SQLite file or an empty PostgreSQL database holds no thread.

    Raises:
        RefusedError: `exists` (exit 4), naming the thread and the database; nothing
            was run or written. Or the database's own refusal (damaged, unreachable).
    """
    try:
        with open_store(db, create=False, read_only=True, name="db") as store:
            found, location = thread_exists(store, thread_id), store.location
    except RefusedError as exc:
        if exc.error_code == ErrorCode.NO_SUCH_FILE:
            return
        raise
    if found:
        raise RefusedError(f"thread {thread_id!r} already exists in {location}: a replay creates the "
                           "recorded thread anew; replay into another database (the mandapi_replay "
                           "fixture makes a new one when db= is not given); nothing was run",
                           error_code=ErrorCode.EXISTS)


def _decide(rec: Recording, out: dict[str, Any]) -> list[list[str]] | None:
    """The decision flags for each undecided paused call; None when the recording ends here."""
    decisions = {(d["attempt"], d["tool_call_id"]): d for d in rec.decisions}
    undecided = [c for c in out.get("pending_calls") or [] if c.get("decision") is None]
    found = [decisions.get((out["attempts"], c["tool_call_id"])) for c in undecided]
    if not any(found) and rec.outcome["status"] == "awaiting_approval":
        return None
    runs = []
    for call, decision in zip(undecided, found, strict=True):
        if decision is None:
            raise ReplayFailure(f"the graph paused write call {call['tool_call_id']} ({call['name']}, "
                                f"turn {out['attempts']}) for review, and the recording has no "
                                "decision for it")
        flag = "--approve" if decision["decision"] == "approve" else "--reject"
        reason = ["--reason", decision["reason"]] if flag == "--reject" and decision["reason"] else []
        runs.append([flag, call["tool_call_id"], *reason])
    return runs


def _drive(rec: Recording, db: str, flags: list[str], model_factory: Callable[[str, Any], Any],
          playback: Any) -> list[dict[str, Any]]:
    """Creates and steps the thread until it ends as far as the recording goes.

    Returns:
        Each invocation's `--json` outcome, in order.

    Raises:
        ReplayFailure: A request failed to match (raised by the transport), a step
            failed in a way a replay never should (exit 1, 2, 4, 5), a paused call has
            no recorded decision, or the thread keeps going past any sensible count.
    """
    base = [f"--thread={rec.thread['thread_id']}", "--db", db, "--live", "--json"]
    outcomes: list[dict[str, Any]] = []

    def step(argv: list[str]) -> dict[str, Any]:
        out = json.loads(run(argv, model_factory=model_factory).to_json())
        if playback.failure:
            raise ReplayFailure(playback.failure)
        outcomes.append(out)
        if out["exit_code"] not in (0, 3, 6, 7):
            raise ReplayFailure(f"step {len(outcomes)} ended with exit {out['exit_code']} "
                                f"({out['error_code']}): {out['error']}")
        return out

    out = step([*base, "--once", *flags])
    for _ in range(2 * len(rec.exchanges) + len(rec.decisions) + 2):
        if out["status"] == "awaiting_approval":
            runs = _decide(rec, out)
            if runs is None:
                return outcomes
            for decision in runs:
                out = step([*base, *decision])
            continue
        played_all = playback.next_index() is None
        if (out["status"] == "exhausted" and out.get("stop_reason") in REOPENABLE
                and (not played_all or rec.outcome["status"] == "ready")):
            out = step([*base, "--reopen"])  # what the recorded thread went on through
            continue
        if out["status"] in _FINAL or (played_all and rec.outcome["status"] == "ready"):
            return outcomes
        # A thread cancelled after its last exchange is cancelled again here.
        out = step([*base, "--cancel"] if played_all and rec.outcome["status"] == "cancelled"
                   else [*base, "--once"])
    raise ReplayFailure(f"the thread was still {out['status']} after {len(outcomes)} invocations")


def _check_end(rec: Recording, db: str, outcomes: list[dict[str, Any]], played: int) -> None:
    """Checks leftovers, the ledger (attempts == claimed == replies) and the final outcome.

    Raises:
        ReplayFailure: The first difference found.
    """
    total, final = len(rec.exchanges), outcomes[-1]
    if played < total:
        raise ReplayFailure(f"{total - played} recorded exchange(s) were never requested: the thread "
                            f"stopped {final['status']} after request {played} of {total} "
                            f"({rec.path})")
    thread_id = str(rec.thread["thread_id"])
    with Database(Settings(db=db), read_only=True) as database:
        entry = database.store.ledger.read(thread_id)
    counts = (entry.attempts, entry.claimed) if entry else (0, 0)
    if counts != (played, played):
        raise ReplayFailure(f"the ledger counts {counts[0]} attempt(s), {counts[1]} sent, for "
                            f"{played} recorded replies")
    expected = rec.outcome
    got = {"status": final["status"], "answer": final.get("answer"), "usage": final.get("usage")}
    want = {"status": expected["status"], "answer": expected.get("answer"), "usage": expected.get("usage")}
    diff = outcome_difference(want, got)
    if diff is not None:
        raise ReplayFailure(f"the replayed thread ended unlike the recording ({rec.path}):\n{diff}")


def replay(recording: str | Path, *, db: str | os.PathLike[str], match: str = "exact",
           workspace: str | Path | None = None, allow_writes: str | Path | None = None
           ) -> ReplayResult:
    """Replays `recording` against the current graph (see the module doc).

    Args:
        recording: A file written by `python -m graph.replay export`.
        db: A SQLite path (a str or an `os.PathLike` such as `pathlib.Path`) or a
            PostgreSQL URL where the recorded thread does not exist yet.
        match: `exact` or `messages_and_tools` (`graph.replay.diff`).
        workspace: The folder to serve as the thread's workspace (default: the recorded
            path); its files must be the recorded ones, or tool results differ.
        allow_writes: The folder approved writes go to (needed when the thread had one).

    Returns:
        What the replay did.

    Raises:
        ReplayFailure: A request differs or is not in the recording, exchanges are left
            over, the ledger or the final outcome differs, or the recording or a folder
            is unusable.
        RefusedError: `exists` (exit 4) when `db` already holds the recorded thread
            (nothing is run), or `db` itself is refused.
        ValueError: An unknown `match`.
    """
    if match not in MODES:
        raise ValueError(f"match must be one of {MODES}, not {match!r}")
    db = os.fspath(db)
    try:
        rec = load_recording(recording)
    except RunError as exc:
        raise ReplayFailure(exc.message) from None
    playback = _Playback(rec, match)
    player = _vcr(playback)
    flags = _identity_flags(rec, workspace, allow_writes)
    _refuse_existing(db, str(rec.thread["thread_id"]))
    base_url = rec.uris[0].removesuffix("/chat/completions") if rec.uris else "https://api.mandapi.com/v1"
    with _environment(base_url), player.use_cassette(
            str(rec.path), serializer="mandapi_replay", match_on=["mandapi_replay_next"],
            allow_playback_repeats=False) as cassette:
        playback.cassette = cassette
        outcomes = _drive(rec, db, flags, _model_factory(playback), playback)
    _check_end(rec, db, outcomes, played=len(cassette.play_counts))
    return ReplayResult(outcomes, list(playback.sent), db, rec.thread["thread_id"])
