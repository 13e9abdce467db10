"""What this machine charges for memory a process or the page cache takes anew: the floor under
every replicated byte (docs/performance.md, "Issue 29: where an RF=3 run's CPU goes").

A replica writes each byte it stores into the page cache, and every buffer a process allocates
anew is faulted in page by page. Both cost CPU in the kernel, and on a virtual machine that
hands memory back to its host (virtio-balloon free page reporting) a page taken from the
reported pool costs a fault on the host as well. This harness measures, in one process:

  page-cache writes   ``os.pwrite`` of 1 MiB blocks into new files, ``--step-mib`` per step,
                      ``--steps`` steps (the files kept until the end, so that each step takes
                      pages the previous ones did not free): CPU ms per MiB and MiB/s per step
  overwrites          the same blocks written again over the first file (its pages cached):
                      the cost of the copy alone
  anonymous faults    a fresh ``mmap`` of ``--step-mib`` touched once per 4 KiB page, three
                      times (each unmapped before the next): µs per fault

Run: ``.venv/bin/python -m benchmarks.bench_page_costs [--steps 6] [--step-mib 512]
[--dir /tmp]``. Needs ``--steps * --step-mib`` of free disk; removes its files.
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
PAGE = mmap.PAGESIZE


def write_step(path: Path, mib: int, block: bytes) -> tuple[float, float]:
    """Write ``mib`` blocks to ``path``; (CPU ms per MiB, MiB/s)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for index in range(mib):
            os.pwrite(fd, block, index * MIB)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        os.close(fd)
    return cpu * 1000 / mib, mib / wall


def fault_cost_us(mib: int) -> float:
    """µs of CPU per page to fault in a fresh anonymous mapping of ``mib``."""
    area = mmap.mmap(-1, mib * MIB)
    try:
        cpu = time.process_time()
        for offset in range(0, mib * MIB, PAGE):
            area[offset] = 1
        return (time.process_time() - cpu) * 1e6 / (mib * MIB // PAGE)
    finally:
        area.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--step-mib", type=int, default=512)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args(argv)
    block = os.urandom(MIB)
    work = Path(tempfile.mkdtemp(prefix="stratalog-page-costs-", dir=args.dir))
    print(f"# bench_page_costs: {args.steps} steps of {args.step_mib} MiB in {work}")
    try:
        for step in range(args.steps):
            ms, rate = write_step(work / f"step-{step}", args.step_mib, block)
            print(f"new pages, step {step}: {ms:6.2f} ms CPU per MiB  {rate:8,.0f} MiB/s")
        ms, rate = write_step(work / "step-0", args.step_mib, block)
        print(f"overwrite of cached pages: {ms:6.2f} ms CPU per MiB  {rate:8,.0f} MiB/s")
    finally:
        for path in work.iterdir():
            path.unlink()
        work.rmdir()
    for trial in range(3):
        print(f"anonymous fault, trial {trial}: {fault_cost_us(args.step_mib):5.2f} µs per"
              f" {PAGE}-byte page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
