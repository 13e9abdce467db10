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

Giving memory back after a crowd leaves: freed blocks go back to malloc, not to the kernel. A
thousand Subscribe streams that held messages and then ended left their memory resident, spread
over the heaps of every thread that touched it (measured: 1,000 stalled subscribers, +150 MiB;
after they cancelled still +150 MiB; after ``malloc_trim`` +37 MiB, in 20 ms).
:func:`trim_heap` calls glibc's ``malloc_trim(0)``, which returns the free pages of every arena;
:class:`TrimWatch` says when that is worth it: when what the server holds for something (the
server watches its waiting RPCs and Subscribe messages) fell by ``min_fall_bytes`` since its
peak, and while it goes on falling after that. A trim on every maintenance pass would hold each arena's lock for milliseconds every
second, for nothing most of the time.

Why the arenas are few (:func:`limit_arenas`): glibc gives threads arenas of their own (up to 8
per core), each made of 64 MiB heaps, and ``malloc_trim`` returns the free pages inside them but
never shrinks a thread arena's top: that shrinks only when its free top passes
``M_TRIM_THRESHOLD``, which the tuning above sets past a whole heap. So a decompression bomb
refused in a pool thread (its 63 MiB of output made of 128 KiB pieces, freed at once) left its
thread's heap resident for good, one per thread that ever took one: 12 bombs in a row, +900 MiB
that never came back (issue 24, finding 9). With two arenas the threads share heaps that
``malloc_trim`` does return (measured in-process: 8 threads, 307 MiB held after trim with the
default arenas, 49 MiB with two). Python allocates under the GIL, so more arenas buy the server
little; gRPC's C threads share these two.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = [
    "TRIM_TO_MMAP_THRESHOLD_RATIO",
    "TrimWatch",
    "limit_arenas",
    "trim_heap",
    "tune_allocator",
]

logger = logging.getLogger(__name__)

# glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
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


def limit_arenas(arena_max: int) -> bool:
    """Let malloc make at most ``arena_max`` arenas (glibc's ``M_ARENA_MAX``, as the
    ``MALLOC_ARENA_MAX`` environment variable sets it); True if it was applied. Call it at
    start-up, before the server's threads allocate: a thread keeps the arena it got.

    ``arena_max`` 0 leaves glibc's default (8 per core) and returns False, as does a C library
    that is not glibc.

    Raises:
        ValueError: ``arena_max`` negative.
    """
    if arena_max < 0:
        raise ValueError(f"arena_max must not be negative, got {arena_max}")
    libc = _glibc()
    if arena_max == 0 or libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = mallopt(_M_ARENA_MAX, arena_max) == 1
    if applied:
        logger.info("malloc makes at most %d arenas", arena_max)
    else:
        logger.warning("glibc refused M_ARENA_MAX %d; left as it was", arena_max)
    return applied


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: AttributeError elsewhere)
    except (OSError, AttributeError):
        return None
    return libc


def trim_heap() -> bool:
    """Return malloc's free memory to the kernel (glibc's ``malloc_trim(0)``: every arena,
    not only the top of the main heap); True if glibc released any.

    Blocking, and it holds each arena's lock while it works on it (milliseconds per hundred MiB
    released): call it in the thread pool, and rarely (see :class:`TrimWatch`). Does nothing
    and returns False where the C library is not glibc.
    """
    libc = _glibc()
    if libc is None:
        return False
    malloc_trim = libc.malloc_trim
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))


class TrimWatch:
    """Says when a trim is due: what is watched fell by ``min_fall_bytes`` since its peak, or
    is still falling after such a fall.

    A crowd of streams does not end at one instant: a trim made while half of it is gone would
    leave the other half's memory resident. So after a due trim every further fall (each call
    that sees less than the last) is due too. Nor is memory freed when the count says so: gRPC
    core frees an ended call's buffers after its Python side is gone, on a loaded machine
    seconds later (a CI run: 60 s after 1,000 subscribers ended, still 64 MiB over the
    baseline, with one trim at the end of the fall). So once the fall stops, the calls
    ``SETTLE_CALLS`` after it are due too (1, 2, 4, 8 and 16 calls on: with a maintenance pass
    a second, five more trims over 16 s, each cheap when there is little to return), and then
    none until the next fall.

    Holds the peak since the last due trim, the last value seen, whether a fall is under way
    and the calls since it stopped. :meth:`trim_due` is O(1). Not thread-safe: one caller (the
    server's maintenance task).
    """

    #: After a fall stops, the calls (counted from the first that sees no fall, 1) that are due.
    SETTLE_CALLS = frozenset({1, 2, 4, 8, 16})

    def __init__(self, min_fall_bytes: int) -> None:
        assert min_fall_bytes >= 1
        self.min_fall_bytes = min_fall_bytes
        self._peak_bytes = 0
        self._last_bytes = 0
        self._falling = False
        self._calls_since_fall: int | None = None

    def trim_due(self, held_bytes: int) -> bool:
        """Record ``held_bytes`` (what is held now); True when a trim is due."""
        last, self._last_bytes = self._last_bytes, held_bytes
        if held_bytes >= last:
            if self._falling:
                # The fall stopped: trims on the calls after it, for what is freed late.
                self._falling = False
                self._peak_bytes = held_bytes
                self._calls_since_fall = 1
                return True
        elif self._falling:
            self._peak_bytes = held_bytes
            return True
        settling = self._settling()
        if held_bytes > self._peak_bytes:
            self._peak_bytes = held_bytes
            return settling
        if self._peak_bytes - held_bytes < self.min_fall_bytes:
            return settling
        self._peak_bytes = held_bytes
        self._falling = True
        self._calls_since_fall = None
        return True

    def _settling(self) -> bool:
        """Count one call since the fall stopped; True on the calls of ``SETTLE_CALLS``."""
        if self._calls_since_fall is None:
            return False
        self._calls_since_fall += 1
        if self._calls_since_fall > max(self.SETTLE_CALLS):
            self._calls_since_fall = None
            return False
        return self._calls_since_fall in self.SETTLE_CALLS
