"""The Redis backend: LangGraph's `RedisSaver`, the ledger as Lua scripts, leases, TTL."""

__all__: list[str] = []
