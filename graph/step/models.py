"""Builds the chat model that serves a thread: the offline demo or MandAPI over httpx.

httpx is imported only when a live model is built, so offline steps do not pay for it.
"""

from __future__ import annotations

from typing import Any

import httpx

from graph.errors import UsageError
from graph.settings import Settings, scrub_key
from nodes.context import ChatModel
from nodes.demo_model import DEMO_MODEL_ID, OfflineDemoModel
from nodes.mandapi import MandApiModel

__all__ = ["make_model"]


def make_model(model_id: str, settings: Settings, *, transport: Any = None) -> ChatModel:
    """Returns the model for `model_id`.

    Args:
        model_id: The thread's stored model id.
        settings: Resolved settings (`live`, key, base URL, timeout).
        transport: An httpx transport to send through instead of the network
            (tests pass `httpx.MockTransport`).

    Returns:
        `OfflineDemoModel` for `offline-demo`, else a `MandApiModel` whose httpx
        client has an explicit timeout, no transport retries and no redirects.

    Raises:
        UsageError: A MandAPI model without `--live` and a key (exit 2).
    """
    if model_id == DEMO_MODEL_ID:
        key = scrub_key(settings)
        return OfflineDemoModel((key,) if key else ())
    if not settings.live or not settings.api_key:
        raise UsageError(
            f"thread model {model_id!r} makes paid requests: add --live and set MANDAPI_API_KEY"
        )


    client = httpx.Client(
        timeout=httpx.Timeout(settings.timeout_s),
        transport=transport if transport is not None else httpx.HTTPTransport(retries=0),
        follow_redirects=False,
    )
    return MandApiModel(
        client, api_key=settings.api_key, model_id=model_id, base_url=settings.base_url
    )
