"""Replay tests: export a thread as a recording and run the current graph against it offline."""

__all__: list[str] = []
