"""Benchmarks: each prints our figure beside its anchors, measured in the same run, and ratios."""
