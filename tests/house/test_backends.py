"""Only `graph/store/` knows the backends (issue 27): no backend branch above storage.

Everything that differs between SQLite, PostgreSQL and Redis is a capability of
`graph.store.base.Store` (`keeps_pool`, `supports_async`, `answers`, ...) or a function
of `graph.store` (`open_queue_db`, `queue_lock`, `reached_by_workers`), implemented per
backend inside `graph/store/`. Read with `ast`, so docstrings and comments may still
name the backends; code may not branch on them.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator

from tests.conftest import ROOT

FORBIDDEN_IMPORTS = (
    "sqlite3", "psycopg", "psycopg_pool", "redis",
    "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres", "langgraph.checkpoint.redis",
    "graph.store.sql", "graph.store.sqlite", "graph.store.postgres", "graph.store.redis",
)
"""Backend drivers, LangGraph's backend savers and our backend packages (and their submodules)."""

BACKEND_WORDS = ("sqlite", "postgres", "postgresql", "redis", "rediss")
"""Names a comparison must not test a value against outside storage (and their URL forms)."""

BACKEND_NAMES = frozenset({"is_postgres", "is_redis", "SqliteSaver", "PostgresSaver", "RedisSaver",
                           "AsyncSqliteSaver", "AsyncPostgresSaver", "AsyncRedisSaver"})
"""Names whose use outside storage is a backend branch."""

BACKEND_ATTRIBUTES = frozenset({"sql", "backend", "is_postgres", "is_redis"})
"""Attributes (`store.sql`, `store.backend`) only storage may read."""


def _forbidden_module(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_IMPORTS)


def _is_backend_word(value: object) -> bool:
    if not isinstance(value, str):
        return False
    word = value.lower().split("://")[0].rstrip(":/")
    return word in BACKEND_WORDS


def backend_branches(source: str, where: str = "<source>") -> list[str]:
    """Every backend branch in `source`: `where:line: what`, one per finding."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"{where}:{line}: imports {a.name}" for a in node.names if _forbidden_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _forbidden_module(node.module):
                found.append(f"{where}:{line}: imports from {node.module}")
            found += [f"{where}:{line}: imports {a.name}" for a in node.names if a.name in BACKEND_NAMES]
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for operand in operands:
                values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                for value in values:
                    if isinstance(value, ast.Constant) and _is_backend_word(value.value):
                        found.append(f"{where}:{line}: compares with {value.value!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith"):
            for arg in node.args:
                values = arg.elts if isinstance(arg, ast.Tuple) else [arg]
                found += [f"{where}:{line}: {node.func.attr}({v.value!r})" for v in values
                          if isinstance(v, ast.Constant) and _is_backend_word(v.value)]
        elif isinstance(node, ast.Name) and node.id in BACKEND_NAMES:
            found.append(f"{where}:{line}: uses {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in BACKEND_ATTRIBUTES:
            found.append(f"{where}:{line}: reads .{node.attr}")
    return found


def _modules_above_store() -> Iterator[tuple[str, str]]:
    for package in ("graph", "nodes"):
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if not where.startswith("graph/store/"):
                yield where, path.read_text()


def test_no_module_outside_store_branches_on_the_backend_or_imports_one() -> None:
    found = [hit for where, source in _modules_above_store() for hit in backend_branches(source, where)]
    assert found == [], "backend branches outside graph/store/ (make each a Store capability):\n" + \
        "\n".join(found)


def test_the_check_finds_each_kind_of_backend_branch() -> None:
    planted = (
        "import sqlite3\n"
        "from graph.store.postgres.locks import advisory_lock\n"
        "from langgraph.checkpoint.sqlite import SqliteSaver\n"
        "from graph.store import is_postgres\n"
        "if store.backend == 'redis': pass\n"
        "if kind in ('sqlite', 'other'): pass\n"
        "if url.startswith('postgresql://'): pass\n"
        "conn = store.sql.conn\n"
        "ok = isinstance(saver, SqliteSaver)\n"
    )
    found = backend_branches(planted)
    for what in ("imports sqlite3", "from graph.store.postgres.locks", "from langgraph.checkpoint.sqlite",
                 "imports is_postgres", "compares with 'redis'", "compares with 'sqlite'",
                 "startswith('postgresql://')", "reads .sql", "reads .backend", "uses SqliteSaver"):
        assert any(what in hit for hit in found), (what, found)
    assert backend_branches("x = 'redis is named in a message'\nif a == 'b': pass\n") == []


def test_an_import_linter_contract_forbids_backend_packages_above_store() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["id"] == "backends-inside-store")
    assert contract["type"] == "forbidden"
    assert {"graph.store.sql", "graph.store.sqlite", "graph.store.postgres", "graph.store.redis",
            "sqlite3", "psycopg", "redis"} <= set(contract["forbidden_modules"])
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")} - {"store"}
    assert {f"graph.{name}" for name in named} | {"nodes"} == set(contract["source_modules"]), \
        "every layer but store/ is a source of the contract"
