"""Run benchmarks of two checkouts in turns: the "before" and "after" of a change, in one run.

A change that must not make anything slower is measured against the code before it on the same
machine at the same time, not against figures from another day: these machines are shared, and
their speed moves by more than most changes do. This runs each named benchmark
(``benchmarks/bench_<name>.py``) once per round from each checkout — the "before" checkout with its
own virtualenv, this one with ours — swapping which goes first every round, so that a slow spell
of the machine falls on both alike. Each run's output is printed as it finishes and kept in
``--out`` (one file per benchmark, side and round) to be read side by side.

The "before" checkout is any directory holding the project at another commit, set up with its own
``make install`` (a ``git worktree`` does it: ``git worktree add ../before <commit> && make -C
../before install``). Benchmark arguments after ``--`` go to both sides alike.

Run: ``.venv/bin/python -m benchmarks.compare --before ../before --rounds 3 storage recovery
-- --runs 1``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent


def _run(checkout: Path, name: str, extra: list[str], out: Path) -> int:
    python = checkout / ".venv" / "bin" / "python"
    started = time.monotonic()
    with out.open("w") as sink:
        result = subprocess.run(
            [str(python), "-m", f"benchmarks.bench_{name}", *extra],
            cwd=checkout, stdout=sink, stderr=subprocess.STDOUT, check=False,
        )
    print(f"--- {out.name}: exit {result.returncode} after {time.monotonic() - started:.0f} s",
          flush=True)
    print(out.read_text(), flush=True)
    return result.returncode


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True,
                        help="the other checkout (with its own .venv)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmark-compare"),
                        help="where each run's output is kept")
    parser.add_argument("names", nargs="+", help="benchmarks, e.g. storage recovery")
    args = parser.parse_args(argv)
    before = args.before.resolve()
    for checkout in (before, PROJECT):
        if not (checkout / ".venv" / "bin" / "python").exists():
            parser.error(f"{checkout} has no .venv/bin/python: run `make install` there first")
    names = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(names)}")
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names:
        for round_number in range(1, args.rounds + 1):
            sides = [("before", before), ("after", PROJECT)]
            if round_number % 2 == 0:
                sides.reverse()
            for side, checkout in sides:
                out = args.out / f"{name}-{side}-{round_number}.txt"
                failed += _run(checkout, name, extra, out) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
