"""MandAPI constants that are cheap to import (no httpx)."""

DEFAULT_BASE_URL = "https://api.mandapi.com/v1"
"""Requests go to `{base_url}/chat/completions`; `MANDAPI_BASE_URL` overrides it."""
