"""Runs every benchmark and prints their tables: `python -m bench.run_all [--quick] [--postgres URL]`."""

from __future__ import annotations

import argparse
import os
import platform

from bench import startup, step_cost, storage, threads, workers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--postgres", help="also measure PostgreSQL and queue workers")
    args = parser.parse_args(argv)
    q = args.quick
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print(startup.run(repeat=2 if q else 7), end="\n\n")
    print(step_cost.run(steps=5 if q else 100), end="\n\n")
    print(storage.run([5, 10] if q else [50, 100, 200], args.postgres), end="\n\n")
    print(threads.run(threads=5 if q else 1000, steps=4), end="\n\n")
    if args.postgres:
        print(workers.run(args.postgres, threads=4 if q else 40, delay=0.05 if q else 0.2))


if __name__ == "__main__":
    main()
