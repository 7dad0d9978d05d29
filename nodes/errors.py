"""Errors raised by nodes and model clients."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class RequestErrorCode(StrEnum):
    """Why a counted model request failed; each value is also a `graph.errors.ErrorCode`.

    Defined here because nodes never import `graph/`; `tests/cli/test_error_contract.py`
    checks that every value is in the project-wide enum with exit code 6.
    """

    TIMEOUT = "timeout"
    CONNECTION = "connection"
    HTTP_STATUS = "http_status"
    BAD_RESPONSE = "bad_response"


class ReplyStopCode(StrEnum):
    """A paid reply that stops its thread; each value is a `graph.errors.ErrorCode` with exit 3.

    `tests/cli/test_error_contract.py` checks both.
    """

    CONTENT_FILTER = "content_filter"
    """The server's content filter stopped the reply (`finish_reason` `content_filter`)."""


class StopReason(StrEnum):
    """Why a failed request stops its thread for good: no rerun could succeed.

    Stored as the thread's `progress.stop_reason` (status `exhausted`, like `budget`,
    `token_cap` and `context_limit`), so no scheduler spends the remaining attempts
    on the same refusal.
    """

    MODEL_NOT_FOUND = "model_not_found"
    """The server says the thread's model does not exist; a thread's model is fixed."""
    INVALID_REQUEST = "invalid_request"
    """The server says the request is invalid (HTTP 400 or 422); a rerun sends the same."""
    CONTENT_FILTER = "content_filter"
    """The server's content filter stopped the reply; a rerun sends the same conversation."""


class ModelRequestError(Exception):
    """A model request failed after its attempt was counted and claimed.

    Attributes:
        error_code: A short stable name: `timeout`, `connection`, `http_status`,
            `bad_response` or `content_filter`. Scripts depend on these names.
        message: One line for people; names the endpoint and status and, for an HTTP
            error, the server's own message (sanitized), never headers or the API key.
        usage: The token counts the service reported for a reply that was paid for
            but refused (`prompt_tokens`, `completion_tokens`, `total_tokens`), or
            None when no valid usage came back. They count toward the thread's cap.
        stop_reason: Set when no rerun can fix the failure: the thread stops with it
            (`StopReason`); None when a rerun may succeed (the thread stays `ready`).
    """

    def __init__(self, error_code: RequestErrorCode | ReplyStopCode, message: str, *,
                 usage: Mapping[str, Any] | None = None,
                 stop_reason: StopReason | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.usage = dict(usage) if usage is not None else None
        self.stop_reason = stop_reason


class InvocationErrorCode(StrEnum):
    """Why the budget node refused an invocation; each value is also a `graph.errors.ErrorCode`.

    `tests/cli/test_error_contract.py` checks that every value is in the project-wide enum.
    """

    IDENTITY_MISMATCH = "identity_mismatch"
    """The invoked thread (`configurable.thread_id`) is not the context's thread."""
    USAGE = "usage"
    """The graph was invoked without a runtime context (`Database.invocation`)."""


class InvocationRefusedError(Exception):
    """The budget node refused the invocation before counting or sending anything.

    Attributes:
        error_code: `identity_mismatch` or `usage` (`InvocationErrorCode`).
        message: One line for people.
        thread_id: The thread the invocation's config names, or None.
    """

    def __init__(self, error_code: InvocationErrorCode, message: str, *,
                 thread_id: str | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.thread_id = thread_id
