"""Every module of `graph/` says what it offers: a literal `__all__` whose names all exist.

Read with `ast` (no module is imported, so no extra is needed). A name of `__all__` must
be bound at the module's top level when it runs: a def, class, assignment or import
(not one under `if TYPE_CHECKING:`, which does not exist at run time). Helpers nothing
outside a module uses are `_private`; what other modules and tests import is listed.
"""

from __future__ import annotations

import ast
import importlib
import warnings

import pytest

from tests.conftest import ROOT


def _modules() -> list[str]:
    found = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "graph").rglob("*.py"))]
    return found


def _bound(body: list[ast.stmt]) -> set[str]:
    """Names the statements bind when the module runs (not under `if TYPE_CHECKING:`)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                parts = target.elts if isinstance(target, ast.Tuple) else [target]
                names |= {t.id for t in parts if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            names |= _bound(node.body) | _bound(node.orelse)
        elif isinstance(node, ast.Try):
            names |= _bound(node.body) | _bound([h for x in node.handlers for h in x.body])
    return names


def declared_all(source: str, module: str = "") -> list[str] | None:
    """The names of the top-level `__all__`, or None when there is none.

    A literal is read as it is; a computed one (the moved-name shims, which forward
    every name of the module they warn about) is read from the imported module,
    whose `__getattr__` must then give each name.
    """
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            try:
                value = ast.literal_eval(node.value) if node.value is not None else None
            except ValueError:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    imported = importlib.import_module(module)
                value = list(imported.__all__)
                assert all(hasattr(imported, name) for name in value), module
                return value
            assert isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
            return list(value)
    return None


@pytest.mark.parametrize("module", _modules())
def test_the_module_declares_all_and_every_name_in_it_exists(module: str) -> None:
    source = (ROOT / module).read_text()
    dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    names = declared_all(source, dotted)
    assert names is not None, f"{module} declares no __all__"
    bound = _bound(ast.parse(source).body)
    if "__getattr__" in bound:  # a shim: its names were checked on the imported module
        bound |= set(names)
    missing = sorted(set(names) - bound)
    assert missing == [], f"{module}: __all__ names what the module does not bind"
    assert len(names) == len(set(names)), f"{module}: __all__ names a name twice"


def test_the_rule_finds_a_missing_all_and_a_name_that_does_not_exist() -> None:
    assert declared_all("def f(): pass\n") is None
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from x import T\n"
              "__all__ = ['T', 'f']\n")
    assert sorted(set(declared_all(source) or []) - _bound(ast.parse(source).body)) == ["T", "f"]
