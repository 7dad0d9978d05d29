"""Errors raised by nodes and model clients."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class RequestErrorCode(StrEnum):
    """Why a counted model request failed; each value is also a `graph.exitcodes.ErrorCode`.

    Defined here because nodes never import `graph/`; `tests/test_error_contract.py`
    checks that every value is in the project-wide enum with exit code 6.
    """

    TIMEOUT = "timeout"
    CONNECTION = "connection"
    HTTP_STATUS = "http_status"
    BAD_RESPONSE = "bad_response"


class ModelRequestError(Exception):
    """A model request failed after its attempt was counted and claimed.

    Attributes:
        error_code: A short stable name: `timeout`, `connection`, `http_status` or
            `bad_response`. Scripts depend on these names.
        message: One line for people; names the endpoint and status, never headers
            or the API key.
        usage: The token counts the service reported for a reply that was paid for
            but refused (`prompt_tokens`, `completion_tokens`, `total_tokens`), or
            None when no valid usage came back. They count toward the thread's cap.
    """

    def __init__(self, error_code: RequestErrorCode, message: str, *,
                 usage: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.usage = dict(usage) if usage is not None else None
