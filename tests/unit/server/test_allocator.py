"""The allocator thresholds (server/allocator.py): applied on glibc, and what they are for."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest

from stratalog.server.allocator import tune_allocator

# Allocate and free 1 MiB buffers, as a server does per 1 MiB request, and count the minor page
# faults: with glibc's defaults the first ones are fresh mmaps; after tuning, heap reuse.
_FAULTS_SCRIPT = """
import resource, sys
from stratalog.server.allocator import tune_allocator
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
