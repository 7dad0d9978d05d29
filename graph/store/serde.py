"""The checkpoint serializer: strict LangGraph msgpack with a content checksum.

`ChecksummedSerializer` subclasses LangGraph's `JsonPlusSerializer`, so LangGraph
keeps treating it as allowlist-capable (a wrapper that is not a `JsonPlusSerializer`
silently turns the strict msgpack allowlist off; verified with langgraph-checkpoint
4.3.2). On top of LangGraph's strict mode it:

* refuses, instead of warning and returning raw data, any msgpack extension type
  outside `ALLOWED_EXT_TYPES` (CVE-2026-28277: a crafted checkpoint could otherwise
  import and call code; our state is plain JSON values and needs no extension type),
* turns off pickle and JSON constructor revival,
* prefixes every stored value with `MAGIC` and a SHA-256 of its type tag and bytes, and
  refuses a value whose checksum does not match or that has none.

What the checksum covers: on SQLite each checkpoint (all channel values) and each
pending write; on PostgreSQL each channel value stored as a blob and each pending
write. Rows outside it (LangGraph's metadata column, the PostgreSQL row's JSON, a
deleted or repointed blob) are covered by `graph.store.saver` and the digests of
`graph.store.digest`; our own tables by `graph.store.rows`. It detects corruption and edits
made without this program; it is no seal against someone who can write the
database, who can recompute it.

`dumps_typed` refuses (`StoredTypeError`) any value `loads_typed` would refuse, so a
developer storing a `datetime`, `Send` or top-level `bytes` gets the error at once.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    JsonPlusSerializer,
    _create_msgpack_ext_hook,
)

from graph.errors import ErrorCode

__all__ = [
    "ALLOWED_EXT_TYPES", "CheckpointIntegrityError", "ChecksummedSerializer", "MAGIC",
    "StoredTypeError", "make_serde",
]

MAGIC = b"MRC1"
"""Marks a value written by this serializer (format 1: magic, 32-byte SHA-256, data)."""
_DIGEST = 32

ALLOWED_EXT_TYPES = frozenset({("langgraph.types", "Interrupt")})
"""The only msgpack extension types ever revived (LangGraph's own interrupt record)."""


class CheckpointIntegrityError(Exception):
    """A stored value failed its checksum or holds a forbidden type.

    Attributes:
        error_code: `damaged` (checksum, decoding) or `incompatible` (a value written
            without this program's checksum format).
    """

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.DAMAGED) -> None:
        super().__init__(message)
        self.error_code = error_code


class StoredTypeError(TypeError):
    """A value this program would refuse to read back was about to be stored (a bug)."""


def _digest(type_: str, data: bytes) -> bytes:
    return hashlib.sha256(type_.encode() + b"\0" + data).digest()


def _strict_ext_hook(refusals: threading.local) -> Any:
    """An ext hook that raises on any type outside `ALLOWED_EXT_TYPES`.

    ormsgpack replaces an exception raised in a hook by a bare `ValueError`, so the
    refusal is also recorded in `refusals.error` for `loads_typed` to report.
    """
    revive = _create_msgpack_ext_hook(None)

    def refuse(why: str) -> CheckpointIntegrityError:
        refusals.error = CheckpointIntegrityError(why)
        return refusals.error

    def hook(code: int, data: bytes) -> Any:
        if code not in (EXT_CONSTRUCTOR_SINGLE_ARG, EXT_CONSTRUCTOR_POS_ARGS,
                        EXT_CONSTRUCTOR_KW_ARGS):
            raise refuse(f"a stored value holds msgpack extension {code}")
        tup = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if not isinstance(tup, (list, tuple)) or len(tup) < 3 or (
                (tup[0], tup[1]) not in ALLOWED_EXT_TYPES):
            name = f"{tup[0]}.{tup[1]}" if isinstance(tup, (list, tuple)) and len(tup) > 1 else "?"
            raise refuse(f"a stored value names a forbidden type {name}")
        return revive(code, data)

    return hook


class ChecksummedSerializer(JsonPlusSerializer):
    """LangGraph's serializer, strict, with a per-value SHA-256 checksum (see module doc)."""

    def __init__(self) -> None:
        self._refusals = threading.local()
        super().__init__(
            pickle_fallback=False,
            allowed_json_modules=None,
            allowed_msgpack_modules=None,
            __unpack_ext_hook__=_strict_ext_hook(self._refusals),
        )

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Serializes like LangGraph, then prefixes `MAGIC` and the checksum.

        Raises:
            StoredTypeError: `obj` holds a value that `loads_typed` would refuse
                (top-level `bytes`, `Send`, `datetime`, sets, any class outside
                `ALLOWED_EXT_TYPES`): the mistake is reported where it is made, not
                on the next run as a damaged checkpoint.
        """
        type_, stored = self.checksummed(obj)
        try:
            self.loads_typed((type_, stored))
        except CheckpointIntegrityError as exc:
            raise StoredTypeError(
                f"cannot store a {type(obj).__name__} value: it would be refused when read "
                f"back ({exc}); keep state to plain JSON values") from None
        return type_, stored

    def checksummed(self, obj: Any) -> tuple[str, bytes]:
        """What `dumps_typed` returns, without reading it back (for digests, `graph.store.digest`).

        Only for values that are stored through `dumps_typed` too (which refuses what
        could not be read back) or were just loaded.
        """
        type_, data = super().dumps_typed(obj)
        return type_, MAGIC + _digest(type_, bytes(data)) + bytes(data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Verifies the checksum, then deserializes strictly.

        Raises:
            CheckpointIntegrityError: No checksum (`incompatible`), a mismatch, a
                forbidden type or undecodable bytes (`damaged`).
        """
        type_, raw = data
        if not isinstance(type_, str) or not isinstance(raw, (bytes, bytearray, memoryview)):
            raise CheckpointIntegrityError(
                f"a stored value has type tag {type(type_).__name__} and data of type "
                f"{type(raw).__name__}, not text and bytes")
        raw = bytes(raw)
        if not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + _DIGEST:
            raise CheckpointIntegrityError(
                f"a stored {type_!r} value has no checksum: written by another program "
                "or a pre-release build", error_code=ErrorCode.INCOMPATIBLE)
        digest, payload = raw[len(MAGIC):len(MAGIC) + _DIGEST], raw[len(MAGIC) + _DIGEST:]
        if _digest(type_, payload) != digest:
            raise CheckpointIntegrityError(f"a stored {type_!r} value fails its checksum")
        if type_ not in ("msgpack", "null"):
            raise CheckpointIntegrityError(f"a stored value has type {type_!r}, never written here")
        self._refusals.error = None
        try:
            return super().loads_typed((type_, payload))
        except Exception as exc:
            refusal = self._refusals.error
            if refusal is not None:
                raise refusal from None
            raise CheckpointIntegrityError(
                f"a stored value cannot be decoded ({type(exc).__name__})") from None


def make_serde() -> ChecksummedSerializer:
    """Returns the serializer both checkpointers use."""
    return ChecksummedSerializer()
