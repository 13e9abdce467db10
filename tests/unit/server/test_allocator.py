"""The allocator thresholds (server/allocator.py): applied on glibc, and what they are for."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest

from stratalog.server.allocator import TrimWatch, tune_allocator

# Allocate and free 1 MiB buffers, as a server does per 1 MiB request, and count the minor page
# faults: with glibc's defaults the first ones are fresh mmaps; after tuning, heap reuse.
_FAULTS_SCRIPT = """
import resource, sys
from stratalog.server.allocator import TrimWatch, tune_allocator
if sys.argv[1] == "tuned":
    assert tune_allocator(32 * 1024 * 1024)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(50):
    # Four requests in flight, each with a 1 MiB buffer (zero-filled: every page touched).
    buffers = [bytearray(1024 * 1024) for _ in range(4)]
    del buffers
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _faults(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", _FAULTS_SCRIPT, mode], capture_output=True, text=True, check=True
    )
    return int(result.stdout)


def test_zero_leaves_the_allocator_alone_and_negative_is_refused():
    assert tune_allocator(0) is False
    with pytest.raises(ValueError, match="must not be negative, got -1"):
        tune_allocator(-1)


@pytest.mark.skipif(not _GLIBC, reason="mallopt thresholds exist in glibc only")
def test_tuned_heap_reuses_large_blocks_instead_of_faulting_them_in():
    assert ctypes.util.find_library("c") is not None
    untuned, tuned = _faults("default"), _faults("tuned")
    # 50 rounds of 4 x 256 pages. With the defaults the 4 MiB freed at the top of the heap
    # exceed the trim threshold and go back to the kernel, so every round faults them in again;
    # tuned, the first round's pages are reused.
    assert untuned > 40 * 4 * 256, (untuned, tuned)
    assert tuned < 3 * 4 * 256, (untuned, tuned)


def test_trim_watch_is_due_once_what_is_held_fell_enough_below_its_peak():
    watch = TrimWatch(min_fall_bytes=100)
    assert [watch.trim_due(held) for held in (0, 50, 300, 250, 250, 201)] == [False] * 6
    assert watch.trim_due(200)  # 100 below the peak of 300
    # Still falling: each further fall is due (the rest of a crowd ending), until it stops.
    assert watch.trim_due(150) and watch.trim_due(149)
    # Stopped: due on the 1st, 2nd, 4th, 8th and 16th call after (what is freed late), a small
    # fall or a rise in between changing nothing; then none.
    settle = [watch.trim_due(held) for held in [149] * 10 + [120, 130] + [130] * 10]
    assert [call for call, due in enumerate(settle, start=1) if due] == [1, 2, 4, 8, 16]
    assert watch.trim_due(30)  # 100 below the peak of 130 (a new one since the last trim)
    settle = [watch.trim_due(30) for _ in range(20)]  # stopped: the settling trims again
    assert [call for call, due in enumerate(settle, start=1) if due] == [1, 2, 4, 8, 16]
    assert not watch.trim_due(500) and not watch.trim_due(401)
    assert watch.trim_due(0)


def test_trim_watch_a_new_fall_while_settling_starts_over():
    watch = TrimWatch(min_fall_bytes=100)
    assert not watch.trim_due(300)
    assert watch.trim_due(100) and watch.trim_due(100)  # a fall; stopped (1st call after)
    assert watch.trim_due(500)  # 2nd call after, a rise: still due
    assert not watch.trim_due(500)  # 3rd
    assert watch.trim_due(300)  # a new fall of 200 below the peak: due, and falling
    assert watch.trim_due(250)  # still falling
    settle = [watch.trim_due(250) for _ in range(20)]
    assert [call for call, due in enumerate(settle, start=1) if due] == [1, 2, 4, 8, 16]


# Hold 200 MiB in 1 MiB blocks from the heap (as tuned), free all but every 16th (what a crowd
# of streams ending leaves: freed blocks between live ones, which the top-of-heap trim cannot
# return), then trim: the resident size must fall back near where it began.
_TRIM_SCRIPT = """
import ctypes, sys
from stratalog.server.allocator import trim_heap, tune_allocator
def rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20
tune_allocator(32 * 1024 * 1024)
start = rss_mib()
blocks = [ctypes.create_string_buffer(1024 * 1024) for _ in range(200)]
held = rss_mib()
kept = blocks[::16]
del blocks
freed = rss_mib()
released = trim_heap()
print(start, held, freed, rss_mib(), released)
"""


@pytest.mark.skipif(not _GLIBC, reason="malloc_trim exists in glibc only")
def test_trim_heap_gives_freed_blocks_between_live_ones_back():
    result = subprocess.run(
        [sys.executable, "-c", _TRIM_SCRIPT], capture_output=True, text=True, check=True
    )
    start, held, freed, trimmed, released = result.stdout.split()
    start, held, freed, trimmed = float(start), float(held), float(freed), float(trimmed)
    assert held - start > 190, result.stdout
    assert freed - start > 150, result.stdout  # free, but still resident: the defect
    assert released == "True"
    assert trimmed - start < 40, result.stdout  # 13 blocks kept, ~13 MiB


# Eight pool threads each build 60 MiB of 128 KiB pieces and free them (what validating a
# refused decompression bomb does), then the heap is trimmed: with glibc's own arenas each
# thread's arena keeps its freed top (a trim never shrinks a thread heap's top, and the tuned
# trim threshold is larger than a thread heap), with two shared arenas the trim returns it.
_ARENAS_SCRIPT = """
import sys, threading
from stratalog.server.allocator import limit_arenas, trim_heap, tune_allocator
def rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20
tune_allocator(32 * 1024 * 1024)
if sys.argv[1] == "limited":
    assert limit_arenas(2)
start = rss_mib()
barrier = threading.Barrier(8)
def bomb():
    barrier.wait()  # all at once: each thread takes an arena of its own if it may
    pieces = [bytearray(128 * 1024) for _ in range(480)]
    barrier.wait()
    del pieces
threads = [threading.Thread(target=bomb) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
trim_heap()
print(rss_mib() - start)
"""


def _arenas_held_mib(mode: str) -> float:
    result = subprocess.run([sys.executable, "-c", _ARENAS_SCRIPT, mode], capture_output=True,
                            text=True, check=True)
    return float(result.stdout)


def test_limit_arenas_zero_leaves_them_alone_and_negative_is_refused():
    from stratalog.server.allocator import limit_arenas

    assert limit_arenas(0) is False
    with pytest.raises(ValueError, match="must not be negative, got -1"):
        limit_arenas(-1)


@pytest.mark.skipif(not _GLIBC, reason="M_ARENA_MAX and malloc_trim exist in glibc only")
def test_few_arenas_let_a_trim_return_what_pool_threads_freed():
    default, limited = _arenas_held_mib("default"), _arenas_held_mib("limited")
    # 8 x 60 MiB were freed: glibc's own arenas keep nearly all of it (measured 480 MiB), two
    # shared ones about one heap (64 MiB).
    assert default > 300, (default, limited)
    assert limited < 160, (default, limited)
