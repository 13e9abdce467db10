"""The CPU priority of the thread pool's threads: below the event loop's.

Intuition: the event loop thread serves every client (gRPC's calls are accepted, parsed and
answered there, and most reads run inline); a thread of the pool (``io_threads``) works on one
request at a time: a compressed Produce's validation, a large read, an fsync, topic admin.
When every CPU is busy the kernel shares them among the runnable threads by weight, and at
equal weight a pool thread kept busy by one client (zstd bombs, each refused only after
decompressing ``produce_decompressed_bytes_max``, sent back to back) takes CPU time from the
loop, and so from every other client. It costs more than its share: gRPC accepts the calls of
one method one at a time, each after a few turns of the loop, so a call waits behind every call
of its method that arrived before it, and every turn of the loop that waits for a CPU is paid
once per call ahead (docs/server.md, "Priorities").

So each pool thread lowers its own priority when it starts (the executor's ``initializer``):
its nice value goes up by ``io_threads_nice`` (10 by default: a weight of 110 against the
loop's 1,024, in the kernel's ``sched_prio_to_weight`` table). A pool thread still gets every
CPU cycle the loop and gRPC's threads leave; it yields when they want one.

Linux only. There the nice value is a property of each thread, not of the process
(setpriority(2), NOTES: "under the current Linux/NPTL implementation of POSIX threads, the
nice value is a per-thread attribute"), so ``setpriority(PRIO_PROCESS, tid, ...)`` changes the
calling thread alone. Elsewhere it would change the whole process, the loop with it: nothing is
done. Raising a nice value never needs a privilege (lowering one does: ``CAP_SYS_NICE``), so a
thread that lowered its priority keeps it for its life, as pool threads do.

Crash behaviour: none; nothing is written. A refusal (a sandbox that forbids setpriority) is
logged once and the thread runs at the process's priority: an executor whose initializer raised
would be broken for good (``BrokenThreadPool``), which a priority is not worth.

Concurrency: :func:`lower_current_thread_priority` acts on the thread that calls it; any thread
may call it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

__all__ = ["NICE_MAX", "lower_current_thread_priority"]

logger = logging.getLogger(__name__)

#: The highest (least favoured) nice value on Linux.
NICE_MAX = 19

_refusal_logged = False


def lower_current_thread_priority(nice_increment: int) -> bool:
    """Add ``nice_increment`` to the calling thread's nice value (at most :data:`NICE_MAX`);
    True if applied. 0, or a platform other than Linux, changes nothing (returns False), as
    does a refusal by the system (logged once). O(1): two system calls.

    Raises:
        ValueError: ``nice_increment`` negative (that would raise the priority, which needs a
            privilege and is not what a pool thread should have).
    """
    if nice_increment < 0:
        raise ValueError(f"nice_increment must be >= 0, got {nice_increment}")
    if nice_increment == 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(NICE_MAX, nice + nice_increment))
    except OSError as exc:
        global _refusal_logged
        if not _refusal_logged:
            _refusal_logged = True
            logger.warning("thread pool: could not lower its threads' CPU priority (%s); they"
                           " run at the event loop's", exc)
        return False
    return True
