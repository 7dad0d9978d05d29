"""Operations on whole threads of an open store: history, subtasks, retention, copy, verification."""

__all__: list[str] = []
