"""Shared helpers: repeat, median and spread, a small table printer, a scripted model."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from nodes.context import ModelReply


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Runs `fn` `repeat` times; returns (median, spread = max - min) in seconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), max(samples) - min(samples)


def measure_alternating(fns: dict[str, Callable[[], Any]], repeat: int
                        ) -> dict[str, tuple[float, float]]:
    """Runs every variant once per round, `repeat` rounds, so the host's noise hits all alike.

    Returns:
        `{name: (median, spread = max - min)}` in seconds.
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: (statistics.median(s), max(s) - min(s)) for name, s in samples.items()}


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    out = [title, line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
    return "\n".join(out)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def prose(seed: int, chars: int = 2000) -> str:
    """Deterministic text that compresses like prose, not like one repeated letter."""
    import random

    rng = random.Random(seed)
    words = "order ship return invoice parcel refund warranty courier customs label delay".split()
    out = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(words) + str(rng.randint(0, 9999)))
    return " ".join(out)[:chars]


class ToolLoopModel:
    """Asks for a tool on every request, with ~2 KB of assistant text each time."""

    def __init__(self) -> None:
        self.n = 0

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.n += 1
        call = {"id": f"call_{self.n}", "type": "function",
                "function": {"name": "search_references",
                             "arguments": json.dumps({"query": "shipping " + "x" * 40})}}
        return ModelReply({"role": "assistant", "content": prose(self.n), "tool_calls": [call]},
                          {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20})
