"""Shared helpers: alternated timing, medians and spreads, tables, deterministic prose.

Every timed comparison in `bench/` runs its variants in the same loop, one sample of
each per round (the order rotating every round), so the host's noise hits all of them;
and it runs that loop twice (two passes) from scratch, so a reader sees how far the
medians and ratios move between passes. `--passes 1` runs it once: a smoke run
(`bench.run_all --quick` gives it to the scripts whose every pass starts processes),
which shows that a script works, not how fast anything is.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

PASSES = 2
"""How many times each timed comparison runs from scratch (unless `--passes` says otherwise)."""


def alternate(variants: Mapping[str, Callable[[int], object]], rounds: int) -> dict[str, list[float]]:
    """Times one call of each variant per round, rotating the order every round.

    Args:
        variants: Name -> callable taking the round number (0-based).
        rounds: How many samples of each variant.

    Returns:
        Name -> the `rounds` samples in seconds, in round order.
    """
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            variants[name](i)
            samples[name].append(time.perf_counter() - start)
    return samples


def summary(samples: Sequence[float]) -> dict[str, float]:
    """`{"median", "p25", "p75"}` of `samples`, in their unit (one sample: all three equal)."""
    if len(samples) < 2:
        return {"median": samples[0], "p25": samples[0], "p75": samples[0]}
    p25, median, p75 = statistics.quantiles(samples, n=4, method="inclusive")
    return {"median": median, "p25": p25, "p75": p75}


def pass_summaries(passes: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, list[dict[str, float]]]:
    """Name -> one `summary` per pass, from each pass's name -> samples."""
    return {name: [summary(p[name]) for p in passes] for name in passes[0]}


def ratios(summaries: Mapping[str, list[dict[str, float]]], name: str, anchor: str) -> list[float]:
    """Per pass: median of `name` ÷ median of `anchor` (both measured in that pass)."""
    return [mine["median"] / base["median"]
            for mine, base in zip(summaries[name], summaries[anchor], strict=True)]


def ms(seconds: float) -> str:
    """`12.3 ms`."""
    return f"{seconds * 1000:.1f} ms"


def per_pass(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """`a / b`: one formatted value per pass."""
    return " / ".join(fmt(v) for v in values)


def spread_ms(s: Mapping[str, float]) -> str:
    """The interquartile range of one pass's summary, `p25–p75 ms`."""
    return f"{s['p25'] * 1000:.1f}–{s['p75'] * 1000:.1f}"


def timing_row(name: str, passes: list[dict[str, float]], ratio: list[float]) -> list[str]:
    """`[name, medians, interquartile ranges, ratios]`, one value per pass in each cell."""
    return [name, per_pass([p["median"] for p in passes], ms),
            " / ".join(spread_ms(p) for p in passes), per_pass(ratio, lambda r: f"{r:.2f}")]


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table under its title."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[Any]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([title, line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Writes a script's results for `bench.run_all` (nothing when `path` is None)."""
    if path:
        Path(path).write_text(json.dumps(results, indent=1))


def prose(seed: int, chars: int = 2000) -> str:
    """Deterministic text that compresses like prose, not like one repeated letter."""
    rng = random.Random(seed)
    words = "order ship return invoice parcel refund warranty courier customs label delay".split()
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(words) + str(rng.randint(0, 9999)))
    return " ".join(out)[:chars]


def pass_names(passes: int) -> str:
    """`pass 1 / pass 2`: what a cell with one value per pass holds, for `passes` passes."""
    return " / ".join(f"pass {n}" for n in range(1, passes + 1))


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def cli_parser(doc: str | None, *, passes: bool = False) -> argparse.ArgumentParser:
    """An argument parser whose `--help` shows the module docstring as written.

    Args:
        doc: The module docstring.
        passes: Also take `--passes N` (default `PASSES`; 1 is a smoke run).
    """
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if passes:
        parser.add_argument("--passes", type=_at_least_one, default=PASSES, metavar="N",
                            help=f"times each comparison runs from scratch (default {PASSES}; "
                            "1 is a smoke run)")
    return parser
