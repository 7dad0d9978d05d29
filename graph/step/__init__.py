"""Advancing one thread by one step: the heart (`graph.step.advance`), its invocation and its outcome."""

__all__: list[str] = []
