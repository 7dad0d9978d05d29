"""Resolves run settings in one place: command-line flag, then environment, then default.

Nodes never read the environment; they get what this module resolved through the
runtime context. A thread's own fixed settings (task, model, limits, folders) are
`graph.settings_spec.ThreadSpec`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from graph.errors import UsageError
from graph.settings_spec import Source, live_name, setting_name
from graph.settings_values import MODEL_ID_RE, check_model_id
from graph.tracing import check_trace
from nodes.mandapi_defaults import DEFAULT_BASE_URL

DB_ENV = "GRAPH_DB"
"""Environment variable naming the checkpoint database when `--db` is not given."""
DEFAULT_DB = "checkpoints.sqlite"
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0

_SECONDS_RE = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?|\.[0-9]{1,9}")
"""A number of seconds as a person writes it: ASCII digits with an optional fraction."""


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


def database_location(db: str | None, name: str = "--db") -> str:
    """`db`, else `$GRAPH_DB`, else `checkpoints.sqlite`.

    Raises:
        UsageError: `db` was given empty (`check_db_flag`, naming `name`).
    """
    return check_db_flag(db, name) or os.environ.get(DB_ENV) or DEFAULT_DB


def _check_base_url(url: str) -> str:
    """Returns `url` if it is a plain, complete http(s) base URL.

    Parsed with `urllib.parse` and checked whole before anything is counted: scheme
    http or https, a valid host (a name, an IPv4 address or a bracketed IPv6 address),
    a port from 1 to 65535 when given, and no credentials, query, fragment or spaces.

    Raises:
        UsageError: Naming what is wrong (exit 2).
    """
    import ipaddress
    from urllib.parse import urlsplit

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
        UsageError: `--live` without a usable `MANDAPI_API_KEY` (printable ASCII), a
            timeout outside (0, 3600] seconds or not written as plain digits, a base
            URL that is not plain http(s) without credentials, a malformed
            `MANDAPI_MODEL_ID`, an empty `--db`, or `--trace` without a LangSmith key
            (`graph.tracing.check_trace`). All are checked before anything is counted.
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
        db=db or env.get(DB_ENV) or DEFAULT_DB,
        live=live,
        api_key=api_key if live else None,
        env_model=env_model if live else None,
        base_url=base_url,
        timeout_s=timeout_s,
        trace=trace,
    )


def scrub_key(settings: Settings) -> str | None:
    """The API key no stored or printed text may hold (INVARIANTS I9), or None.

    The key of `--live`, else `MANDAPI_API_KEY` when it is set at all: an offline run
    never sends it, but a workspace file, a task or a folder name may still spell it.
    """
    import os

    return settings.api_key or os.environ.get("MANDAPI_API_KEY") or None
