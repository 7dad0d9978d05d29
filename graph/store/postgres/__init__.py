"""The PostgreSQL backend: LangGraph's `PostgresSaver`, advisory locks, the quick poll."""

__all__: list[str] = []
