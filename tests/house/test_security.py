"""Installed libraries carry the published security fixes the project depends on."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.version import Version

FLOORS = {
    "langgraph": "1.2.24",
    "langgraph-checkpoint": "4.3.2",  # CVE-2025-64439, CVE-2026-27794, CVE-2026-48775
    "langgraph-checkpoint-sqlite": "3.1.2",  # CVE-2025-67644 (metadata filter SQL injection)
    "langgraph-checkpoint-postgres": "3.2.0",
    "langchain-core": "1.6.6",  # CVE-2025-68664
}


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_installed_version_meets_its_security_floor(package: str) -> None:
    assert Version(version(package)) >= Version(FLOORS[package])


def test_pyproject_declares_the_same_floors() -> None:
    import tomllib

    from tests.conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["postgres"]
    for package, floor in FLOORS.items():
        assert f"{package}>={floor}" in declared, package
