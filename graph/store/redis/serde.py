"""The strict serializer of the Redis checkpointer (`graph.store.redis.saver`).

LangGraph's `RedisSaver` builds its own `JsonPlusRedisSerializer` and stores values as
RedisJSON: on load it revives LangChain constructor envelopes (`{"lc": 1, "type":
"constructor", "id": [module..., class], ...}`) by importing the named module and calling
the class, and markers for `Send`, `_DeltaSnapshot`, sets, dataclasses and bytes.
`StrictRedisSerializer` revives only LangGraph's `Interrupt` record (the one type the
other backends allow, `graph.store.serde.ALLOWED_EXT_TYPES`) and refuses any other envelope or
marker with `CheckpointIntegrityError` (`damaged`): no code runs from stored data. Its
msgpack fallback is LangGraph's strict mode without pickle (as `graph.store.serde`).

`checksummed` gives the canonical form the digests of `graph.store.digest` hash on this
backend: JSON with sorted keys of the value as stored, so a value hashes the same when
handed to `put` and when loaded back (key order, tuples as lists, revived interrupts).
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
from langgraph.checkpoint.redis.jsonplus_redis import (
    JsonPlusRedisSerializer,
    _deserialize_interrupt,
)

from graph.store.serde import CheckpointIntegrityError, StoredTypeError, _strict_ext_hook

__all__ = ["StrictRedisSerializer"]

_ENVELOPE_TYPES = frozenset({"constructor", "secret", "not_implemented"})
_MARKERS = ("__send__", "__delta_snapshot__", "__bytes__")
_TYPES = frozenset({"json", "msgpack", "null"})


def _storable(obj: Any) -> Any:
    """`obj`, or for an exception (the `__error__` write of a failed task) its `repr`.

    LangGraph saves a failed task's writes with the exception it raised; the other
    backends' msgpack serializer stores an exception as its `repr` (text), and
    `graph.step.repair.unrouted_output` needs that write to keep a node's output whose
    routing failed. `RedisSaver`'s JSON form would be a constructor envelope, refused on
    load, so the same text is stored here.
    """
    return repr(obj) if isinstance(obj, BaseException) else obj


class StrictRedisSerializer(JsonPlusRedisSerializer):
    """`JsonPlusRedisSerializer` that revives nothing but `Interrupt` (see module doc)."""

    def __init__(self) -> None:
        self._refusals = threading.local()
        super().__init__(pickle_fallback=False, allowed_json_modules=None,
                         allowed_msgpack_modules=None,
                         __unpack_ext_hook__=_strict_ext_hook(self._refusals))

    def revive(self, obj: Any) -> Any:
        """Turns loaded JSON into values: interrupt records only, everything else as is.

        Raises:
            CheckpointIntegrityError: A LangChain envelope (`lc` with type constructor,
                secret or not_implemented) or a LangGraph marker other than an interrupt.
        """
        if isinstance(obj, list):
            return [self.revive(item) for item in obj]
        if not isinstance(obj, dict):
            return obj
        if obj.get("lc") in (1, 2) and obj.get("type") in _ENVELOPE_TYPES:
            raise CheckpointIntegrityError(
                f"a stored value is a LangChain {obj.get('type')} envelope for "
                f"{obj.get('id')!r}: nothing is revived from stored data")
        for marker in _MARKERS:
            if marker in obj:
                raise CheckpointIntegrityError(f"a stored value holds a {marker} marker, "
                                               "never written here")
        revived = {key: self.revive(value) for key, value in obj.items()}
        if revived.get("__interrupt__") is True:
            if set(revived) - {"__interrupt__", "value", "id", "resumable", "ns", "when"}:
                raise CheckpointIntegrityError("a stored interrupt record has unknown keys")
            try:
                return _deserialize_interrupt(revived)
            except (TypeError, ValueError, KeyError):
                raise CheckpointIntegrityError("a stored interrupt record is malformed") from None
        return revived

    def _revive_if_needed(self, obj: Any) -> Any:
        return self.revive(obj)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Serializes like `RedisSaver`, refusing what `loads_typed` would refuse.

        Raises:
            StoredTypeError: `obj` holds a value that would not load back (bytes, a set,
                a `Send`, a class instance): reported where it is stored (a bug).
        """
        stored = super().dumps_typed(_storable(obj))
        try:
            self.loads_typed(stored)
        except CheckpointIntegrityError as exc:
            raise StoredTypeError(
                f"cannot store a {type(obj).__name__} value: it would be refused when read "
                f"back ({exc}); keep state to plain JSON values") from None
        return stored

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Deserializes strictly.

        Raises:
            CheckpointIntegrityError: A type tag never written here, undecodable data or
                a refused envelope (`damaged`).
        """
        type_, raw = data
        if type_ not in _TYPES:
            raise CheckpointIntegrityError(f"a stored value has type {type_!r}, never written here")
        self._refusals.error = None
        try:
            return super().loads_typed((type_, raw))
        except CheckpointIntegrityError:
            raise
        except Exception as exc:
            refusal = self._refusals.error
            if refusal is not None:
                raise refusal from None
            raise CheckpointIntegrityError(
                f"a stored value cannot be decoded ({type(exc).__name__})") from None

    def checksummed(self, obj: Any) -> tuple[str, bytes]:
        """The canonical form a digest covers: sorted-key JSON of the stored form."""
        processed = self._preprocess_redis_json(_storable(obj), encode_bytes=lambda b: b.hex())
        return "json", orjson.dumps(processed, default=self._default_handler,
                                    option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
