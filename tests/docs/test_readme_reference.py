"""The README states what a first live run and a first write need: the write tools' argument
names (as the specs in code name them) and the `/v1` that `MANDAPI_BASE_URL` includes."""

from __future__ import annotations

from nodes.mandapi_defaults import DEFAULT_BASE_URL
from nodes.write_tools import WRITE_TOOL_SPECS
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_names_each_write_tool_and_its_arguments_as_the_specs_do() -> None:
    writes = section("Writes only after a person approves them")
    for spec in WRITE_TOOL_SPECS:
        function = spec["function"]
        assert f"`{function['name']}`" in writes
        for argument in function["parameters"]["properties"]:
            assert f"`{argument}`" in writes, argument
    assert '`{"path": "shipping.md", "text": "..."}`' in writes


def test_the_readme_says_the_base_url_includes_v1() -> None:
    live = section("Real model requests (MandAPI)")
    assert DEFAULT_BASE_URL.endswith("/v1") and f"`{DEFAULT_BASE_URL}/chat/completions`" in live
    assert "**`/v1` included**" in live and "`MANDAPI_BASE_URL=http://127.0.0.1:8000/v1`" in live
