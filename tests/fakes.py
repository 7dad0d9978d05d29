"""Scripted stand-ins used by the tests: a chat model and MandAPI wire replies."""

from __future__ import annotations

import json
from typing import Any

from nodes.context import ModelReply
from nodes.errors import ModelRequestError, RequestErrorCode


def tool_call_reply(call_id: str, query: str = "shipping") -> ModelReply:
    """An assistant reply asking for `search_references(query)`."""
    return ModelReply(
        message={
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "search_references", "arguments": json.dumps({"query": query})},
                }
            ],
        },
        usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    )


def answer_reply(text: str) -> ModelReply:
    """An assistant reply with a final answer."""
    return ModelReply(
        message={"role": "assistant", "content": text},
        usage={"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
    )


class ScriptedModel:
    """A `ChatModel` that returns (or raises) scripted items and records each request.

    An item may be a `ModelReply`, an exception to raise after recording the request,
    or a callable taking the messages. Running out of script fails the test.
    """

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.requests.append(json.loads(json.dumps(messages)))
        self.tools.append(json.loads(json.dumps(tools)))
        if not self.script:
            raise AssertionError("unexpected model request: the script is used up")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return item(messages)
        return item


class NeverFinishes(ScriptedModel):
    """Asks for a tool on every request, forever."""

    def __init__(self) -> None:
        super().__init__([])

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.requests.append(messages)
        return tool_call_reply(f"call_{len(self.requests)}")


class RecordingLog:
    """An `AttemptLog` that keeps its rows in a list, as `(thread_id, attempt, kind, payload)`."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str, dict[str, Any]]] = []

    def record(self, thread_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> None:
        self.rows.append((thread_id, attempt, kind, json.loads(json.dumps(payload))))

    def used_tokens(self, thread_id: str) -> int:
        return sum(int((p.get("usage") or {}).get("total_tokens", 0))
                   for t, _, kind, p in self.rows if t == thread_id and kind == "reason")


def timeout_error() -> ModelRequestError:
    return ModelRequestError(RequestErrorCode.TIMEOUT, "request to http://fake/chat/completions timed out")


def chat_completion(message: dict[str, Any], usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A MandAPI (OpenAI-compatible) response body carrying `message`."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    }
