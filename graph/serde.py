"""The checkpoint serializer: LangGraph's `JsonPlusSerializer` in strict mode.

Strict msgpack (no module allowlist: only LangGraph's safe types are revived), no
pickle fallback and no JSON constructor revival, whatever `LANGGRAPH_STRICT_MSGPACK`
says (CVE-2026-28277: a crafted checkpoint could otherwise import and call code).
Our state holds only JSON-friendly values, so nothing else is ever needed.
"""

from __future__ import annotations

from typing import Any


def make_serde() -> Any:
    """Returns a strict `JsonPlusSerializer` for the checkpointers."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(
        pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None
    )
