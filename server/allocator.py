"""The C allocator's thresholds for large blocks: why a server that moves MiB messages sets them.

Intuition: every Produce of a 1 MiB batch makes a few 1 MiB buffers (gRPC assembles the message,
protobuf hands out the bytes field, validation copies it to assign offsets) that live for a
millisecond. glibc's malloc serves blocks above ``M_MMAP_THRESHOLD`` (128 KiB at first, raised
dynamically up to 32 MiB as such blocks are freed) with a fresh ``mmap`` and returns them with
``munmap``, and gives the top of its heap back to the kernel above ``M_TRIM_THRESHOLD``: so each
of those buffers costs 256 page faults, a zeroed page each, and an unmap: more CPU than the
append itself (figures in docs/configuration.md, ``malloc_mmap_threshold_bytes``, and
docs/performance.md).

:func:`tune_allocator` sets ``M_MMAP_THRESHOLD`` (blocks below it come from the heap, reused
without faults) and ``M_TRIM_THRESHOLD`` (the free heap kept before it is trimmed) through
``mallopt``. The cost is memory: up to the trim threshold of freed heap may stay resident per
arena after a burst of large requests, instead of going back to the kernel at once.

Only glibc has ``mallopt`` with these parameters; elsewhere (musl, macOS, Windows) nothing is
changed and the function says so. Call it once, at start-up, before serving.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["TRIM_TO_MMAP_THRESHOLD_RATIO", "tune_allocator"]

logger = logging.getLogger(__name__)

# glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's own dynamic rule keeps the trim threshold at twice the mmap threshold; four times
# leaves room for the several large buffers of the requests in flight.
TRIM_TO_MMAP_THRESHOLD_RATIO = 4
# mallopt takes an int; glibc caps M_MMAP_THRESHOLD at 32 MiB on 64-bit (HEAP_MAX_SIZE / 2).
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def tune_allocator(mmap_threshold_bytes: int) -> bool:
    """Serve blocks under ``mmap_threshold_bytes`` from malloc's heap; True if it was applied.

    ``mmap_threshold_bytes`` 0 leaves the allocator as it is (returns False). The value is
    capped at 32 MiB, glibc's maximum. Returns False, changing nothing, where the C library is
    not glibc or refuses the setting.

    Raises:
        ValueError: ``mmap_threshold_bytes`` negative.
    """
    if mmap_threshold_bytes < 0:
        raise ValueError(f"mmap_threshold_bytes must not be negative, got {mmap_threshold_bytes}")
    if mmap_threshold_bytes == 0:
        return False
    threshold = min(mmap_threshold_bytes, _MMAP_THRESHOLD_MAX)
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        logger.info("not tuning the allocator: the C library is not glibc")
        return False
    gnu_get_libc_version.restype = ctypes.c_char_p
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on error.
    applied = (
        mallopt(_M_MMAP_THRESHOLD, threshold) == 1
        and mallopt(_M_TRIM_THRESHOLD, threshold * TRIM_TO_MMAP_THRESHOLD_RATIO) == 1
    )
    if applied:
        logger.info(
            "glibc %s: malloc serves blocks under %d bytes from its heap and trims above %d",
            gnu_get_libc_version().decode(), threshold, threshold * TRIM_TO_MMAP_THRESHOLD_RATIO,
        )
    else:
        logger.warning("glibc refused the malloc thresholds; left as they were")
    return applied
