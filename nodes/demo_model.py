"""The offline demo model: no network, no key, deterministic.

On its first call it asks for a reference look-up (`search_references` with the
task text); once a tool result is in the conversation it answers from the best hit,
citing the reference id. It is the default model (`offline-demo`), so the main job
and the tests run without spending money.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.context import ModelReply

DEMO_MODEL_ID = "offline-demo"


def _estimate_tokens(payload: Any) -> int:
    """About four characters per token, as a stand-in for a real tokenizer."""
    return max(1, len(json.dumps(payload, ensure_ascii=False)) // 4)


class OfflineDemoModel:
    """A scripted stand-in for MandAPI that follows the same `ChatModel` protocol."""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Returns a tool call on the first turn and a cited answer after a tool result."""
        from nodes.context import ModelReply  # here: DEMO_MODEL_ID stays cheap to import
        from nodes.state import Usage

        task = next((m["content"] for m in messages if m["role"] == "user"), "")
        tool_results = [m for m in messages if m["role"] == "tool"]
        if not tool_results:
            turn = sum(1 for m in messages if m["role"] == "assistant") + 1
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "I will look this up in the shop's references.",
                "tool_calls": [
                    {
                        "id": f"call_demo_{turn}",
                        "type": "function",
                        "function": {
                            "name": "search_references",
                            "arguments": json.dumps({"query": task}),
                        },
                    }
                ],
            }
        else:
            message = {"role": "assistant", "content": self._answer(tool_results[-1]["content"])}
        prompt = _estimate_tokens(messages) + _estimate_tokens(tools)
        completion = _estimate_tokens(message)
        usage = Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        return ModelReply(message=message, usage=usage)

    @staticmethod
    def _answer(tool_text: str) -> str:
        try:
            hits = json.loads(tool_text).get("hits") or []
        except (json.JSONDecodeError, AttributeError):
            hits = []
        if not hits:
            return "I found no reference that answers this task, so I cannot answer it."
        best = hits[0]
        return f"{best['text']} [{best['id']}]"
