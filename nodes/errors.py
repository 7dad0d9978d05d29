"""Errors raised by nodes and model clients."""

from __future__ import annotations


class ModelRequestError(Exception):
    """A model request failed after its attempt was counted and claimed.

    Attributes:
        error_code: A short stable name: `timeout`, `connection`, `http_status` or
            `bad_response`. Scripts depend on these names.
        message: One line for people; names the endpoint and status, never headers
            or the API key.
    """

    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
