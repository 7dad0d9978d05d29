"""The house rules of the code, checked by reading it (`ast`), so a repair stays repaired.

Each test lists every offender it finds, with its place, so one run shows all the work.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from tests.conftest import ROOT

PACKAGES = ("graph", "nodes")
"""Our packages; `nodes/` must never import `graph/`."""

STORAGE_MODULES = frozenset({
    "graph/store/sql/schema.py",
    "graph/store/sql/conn.py",
    "graph/store/base.py",
    "graph/store/sqlite/file.py",
    "graph/store/sqlite/open.py",
    "graph/store/postgres/open.py",
    "graph/store/sql/ledger.py",
    "graph/store/sqlite/ledger.py",
    "graph/store/sql/attempt_log.py",
    "graph/store/sql/approvals.py",
    "graph/store/sql/tombstones.py",
    "graph/store/digest.py",
    "graph/store/sql/summaries.py",
    "graph/store/sql/window.py",
})
"""The modules allowed to hold SQL text naming our tables (paths from the project root).

Every other module reaches our tables through these. Adjust this set when storage
modules are renamed, split or merged; never add a module only to silence the test.
"""

_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|FROM|INTO|JOIN|TRIGGER)\b")
_DDL = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\{?\w+\}?)")


def _modules() -> Iterator[tuple[str, ast.Module]]:
    """`(path from the root, parsed module)` of every module of our packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """`(line, text)` of every string constant, including the literal parts of f-strings."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _our_tables() -> set[str]:
    """Names of the tables our DDL in `graph/` creates (a `{NAME}` is a module-level constant).

    If a table's DDL stops matching (its name built another way), the test of this
    finder fails: extend the finder then, so the SQL check keeps seeing every table.
    """
    constants: dict[str, str] = {}
    found: set[str] = set()
    for _, tree in _modules():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                constants.update({t.id: node.value.value for t in node.targets
                                  if isinstance(t, ast.Name)})
    for path, _ in _modules():
        found.update(_DDL.findall((ROOT / path).read_text()))
    resolved = {constants.get(name[1:-1], "") if name.startswith("{") else name for name in found}
    return resolved - {""}


def test_our_tables_are_found_in_the_ddl() -> None:
    assert _our_tables() >= {"attempt_ledger", "attempt_log", "request_caps", "thread_tombstones",
                             "write_approvals", "checkpoint_digests"}


def _defined_after_main_block(tree: ast.Module) -> list[str]:
    """Names defined after a module's `if __name__ == "__main__":` block."""
    late, seen_main = [], False
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            seen_main = True
        elif seen_main and isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Assign):
            late.append(getattr(node, "name", ast.unparse(node)[:40]))
    return late


def test_nothing_is_defined_after_an_entry_points_main_block() -> None:
    # `python -m graph.batch` runs main() at that block: a helper defined below it does
    # not exist yet (a NameError, exit 1, that in-process tests never see).
    late = {path: names for path, tree in _modules() if (names := _defined_after_main_block(tree))}
    assert not late, f"defined after the __main__ block: {late}"
    assert _defined_after_main_block(ast.parse(
        'def main(): pass\nif __name__ == "__main__":\n    main()\ndef helper(): pass\n')) == ["helper"]


def _graph_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """`(line, module)` of every absolute import of `graph` or a module under it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        yield from ((node.lineno, name) for name in names
                    if name == "graph" or name.startswith("graph."))


def test_nodes_never_import_graph() -> None:
    imports = [f"{path}:{line} {name}" for path, tree in _modules() if path.startswith("nodes/")
               for line, name in _graph_imports(tree)]
    assert not imports, f"nodes/ imports graph/: {imports}"


def _takes_error_code(trees: list[ast.Module]) -> dict[str, int | None]:
    """Callables with an `error_code` parameter: name -> its positional index.

    A class counts by its `__init__` (index without `self`); the index is None when the
    parameter is keyword-only.
    """
    found: dict[str, int | None] = {}
    for node in (n for tree in trees for n in ast.walk(tree)):
        owners = ([(node.name, f) for f in node.body if isinstance(f, ast.FunctionDef)
                   and f.name == "__init__"] if isinstance(node, ast.ClassDef)
                  else [(node.name, node)] if isinstance(node, ast.FunctionDef) else [])
        for name, func in owners:
            positional = [a.arg for a in [*func.args.posonlyargs, *func.args.args]
                          if a.arg not in ("self", "cls")]
            if "error_code" in positional:
                found[name] = positional.index("error_code")
            elif "error_code" in [a.arg for a in func.args.kwonlyargs]:
                found[name] = None
    return found


def _is_str(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _bare_error_codes(tree: ast.AST, takes: dict[str, int | None]) -> Iterator[ast.expr | ast.stmt]:
    """Every place an `error_code` gets a bare string instead of an `ErrorCode` member."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "error_code" and _is_str(node.value):
            yield node.value
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_str(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "error_code"
                   or isinstance(t, ast.Attribute) and t.attr == "error_code" for t in targets):
                yield node
        elif isinstance(node, ast.Dict):
            yield from (v for k, v in zip(node.keys, node.values, strict=True)
                        if isinstance(k, ast.Constant) and k.value == "error_code" and _is_str(v))
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            index = takes.get(name) if name else None
            if index is not None and index < len(node.args) and _is_str(node.args[index]):
                yield node.args[index]


def test_every_error_code_is_an_enum_member_never_a_bare_string() -> None:
    takes = _takes_error_code([tree for _, tree in _modules()])
    bare = [f"{path}:{node.lineno}" for path, tree in _modules() for node in _bare_error_codes(tree, takes)]
    assert not bare, f"error_code given as a bare string (use graph.errors.ErrorCode): {bare}"


def _sql_naming(tree: ast.AST, tables: set[str]) -> Iterator[tuple[int, list[str]]]:
    """`(line, tables)` of every string that reads as SQL and names one of `tables`."""
    named = re.compile(r"\b(" + "|".join(sorted(tables)) + r")\b")
    for line, text in _strings(tree):
        if _SQL.search(text) and named.search(text):
            yield line, sorted(set(named.findall(text)))


def test_no_sql_naming_our_tables_outside_the_storage_modules() -> None:
    tables = _our_tables()
    found = [f"{path}:{line} {names}" for path, tree in _modules() if path not in STORAGE_MODULES
             for line, names in _sql_naming(tree, tables)]
    assert not found, f"SQL naming our tables outside {sorted(STORAGE_MODULES)}: {found}"


def test_every_storage_module_named_in_the_house_rules_exists() -> None:
    missing = sorted(path for path in STORAGE_MODULES if not (ROOT / path).is_file())
    assert not missing, f"STORAGE_MODULES names modules that do not exist: {missing}"


def test_each_house_check_catches_what_it_looks_for() -> None:
    tree = ast.parse("""
import graph.step.advance
from graph import store
from nodes import context
class Refused(Exception):
    def __init__(self, message, error_code): ...
def fail(*, error_code): ...
Refused("m", "damaged")
Refused("m", error_code="damaged")
fail(error_code=ErrorCode.DAMAGED)
outcome.error_code = "step_failed"
error: dict = {"error_code": "timeout"}
rows = conn.execute(f"SELECT * FROM attempt_ledger WHERE thread_id = {t}")
note = "the attempt_ledger row"
""")
    assert [name for _, name in _graph_imports(tree)] == ["graph.step.advance", "graph"]
    bare = sorted(node.lineno for node in _bare_error_codes(tree, _takes_error_code([tree])))
    assert bare == [8, 9, 11, 12]
    assert list(_sql_naming(tree, {"attempt_ledger"})) == [(13, ["attempt_ledger"])]


def _listed_test_files(text: str) -> set[str]:
    """The test files a page names, as paths from `tests/` without `.py` (`store/test_ledger`).

    A name is a path of folders ending in `test_...`, written from `tests/` or from the root;
    a test named after its file (`step/test_crash::test_sigkill...`) is not a file.
    """
    found = re.findall(r"(?<![\w/.:-])((?:[a-z0-9_]+/)*test_[a-z0-9_]+)\b", text)
    return {name.removeprefix("tests/") for name in found}


def test_the_tests_readme_lists_every_test_file_and_no_file_that_is_gone() -> None:
    tests = ROOT / "tests"
    listed = _listed_test_files((tests / "README.md").read_text())
    files = {path.relative_to(tests).with_suffix("").as_posix() for path in tests.rglob("test_*.py")}
    assert files - listed == set(), "test files tests/README.md does not place"
    assert listed - files == set(), "tests/README.md names test files that are gone"
    assert _listed_test_files("`tests/store/redis/test_ledger.py`, step/test_crash and test_rules"
                              ", step/test_resume::test_a_resume") == {
        "store/redis/test_ledger", "step/test_crash", "test_rules", "step/test_resume"}


def test_every_test_the_tests_readme_names_exists() -> None:
    """A row that names one test (`store/redis/test_helper_keys::test_...`) names a test that
    is there: a renamed test would leave the reported failure pointing at nothing."""
    tests = ROOT / "tests"
    named = re.findall(r"((?:[a-z0-9_]+/)*test_[a-z0-9_]+)::(test_[a-z0-9_]+)",
                       (tests / "README.md").read_text())
    assert named, "the page names single tests in its table of reported failures"
    missing = [f"{path}::{name}" for path, name in named
               if not re.search(rf"^(?:async )?def {name}\(", (tests / f"{path}.py").read_text(), re.M)]
    assert missing == []
