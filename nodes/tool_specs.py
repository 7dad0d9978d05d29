"""The tools offered to the model, in the OpenAI chat-completions `tools` format.

What a thread is offered depends only on its fixed settings (`--workspace`,
`--allow-writes`), so the same thread always sees the same tools in the same order.
"""

from __future__ import annotations

from typing import Any

from nodes.write_tools import WRITE_TOOL_SPECS


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


REFERENCE_TOOL_SPECS: list[dict[str, Any]] = [
    _spec(
        "search_references",
        "Search the shop's reference documents; returns the best hits with their ids and text.",
        {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 5}},
        ["query"],
    ),
    _spec(
        "get_reference",
        "Read one reference document by its id, for example 'ship-01'.",
        {"ref_id": {"type": "string"}},
        ["ref_id"],
    ),
    _spec(
        "list_references",
        "List reference ids and titles, optionally of one topic "
        "(shipping, returns, payment, warranty).",
        {"topic": {"type": "string"}},
        [],
    ),
]
"""The demo shop's reference tools, in the OpenAI chat-completions `tools` format."""

WORKSPACE_TOOL_SPECS: list[dict[str, Any]] = [
    _spec("list_files", "List the files under a folder of the workspace (relative path).",
          {"path": {"type": "string", "default": "."}}, []),
    _spec("read_file", "Read lines of a text file in the workspace; cite the evidence id "
          "(path#Lstart-Lend) it returns.",
          {"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1},
           "limit": {"type": "integer", "minimum": 1, "maximum": 200}}, ["path"]),
    _spec("search_text", "Find lines containing a text in the workspace's files; returns "
          "file, line number and line.",
          {"query": {"type": "string"}, "path": {"type": "string", "default": "."}}, ["query"]),
]
"""Read-only workspace tools, offered only to threads created with `--workspace`."""

TOOL_SPECS = REFERENCE_TOOL_SPECS
"""The tools of a thread without a workspace."""


def tool_specs(with_workspace: bool, with_writes: bool = False) -> list[dict[str, Any]]:
    """The tools offered to a thread, in the order offered."""
    return (REFERENCE_TOOL_SPECS + (WORKSPACE_TOOL_SPECS if with_workspace else [])
            + (WRITE_TOOL_SPECS if with_writes else []))
