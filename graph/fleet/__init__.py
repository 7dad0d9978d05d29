"""Many threads at once: tasks files, a batch's shared request cap, and the queue worker."""

__all__: list[str] = []
