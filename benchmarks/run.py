"""Run every benchmark of the harness in turn: ``make bench`` (or ``python -m benchmarks.run``).

Each ``benchmarks/bench_*.py`` module is a standalone script that prints its own table and
starts (and stops) whatever it needs, a server process included. They run one after another, each
in its own interpreter so that one's memory and threads do not disturb the next one's figures.
Pass names to run a subset: ``python -m benchmarks.run records storage``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    names = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    chosen = argv or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(names)}",
              file=sys.stderr)
        return 2
    failed = []
    for name in chosen:
        print(f"\n=== benchmarks.bench_{name} ===", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", f"benchmarks.bench_{name}"],
                                cwd=HERE.parent, check=False)
        print(f"=== bench_{name}: exit {result.returncode} after "
              f"{time.monotonic() - started:.0f} s ===", flush=True)
        if result.returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
