"""Imports numpy (through rank_bm25) with one BLAS thread: for the forkserver's preload.

A run that ranks (the tools node) imports rank_bm25 and numpy on first use, about 0.1–0.2 s
in every forked child, and on a loaded host that import holds the interpreter lock for long
enough to starve a short Redis lease's renewal (the run then ends `busy`). Imported once in
the forkserver instead, with OpenBLAS and OpenMP limited to one thread before numpy loads:
a forkserver whose BLAS had started its thread pool made every child slower. Only the
forkserver's environment is changed; each child replaces its environment with its own.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import rank_bm25  # noqa: E402, F401 - imported for its side effect: numpy loaded once

__all__: list[str] = []
