"""CPython's cyclic garbage collector in a server: what it scans, and how often.

Intuition: CPython frees most objects by reference counting; its cyclic collector finds the
rest by scanning the container objects it tracks, in three generations. A full (generation 2)
collection scans every one of them, on the thread that allocated last: for a server, the event
loop, which answers no one meanwhile. A server holds many objects that live as long as the
process (the modules, and the LogManager's partitions, segments and indexes: ~62 tracked
objects per partition, so 620,000 for 10,000 partitions), and a burst of calls adds tens of
thousands more that live while the calls wait. Measured in issue 13's attack test (1,000
subscribers and 1,030 long polls arriving at once): two full collections of ~65 ms each per
burst, a third of the event loop's time for it (docs/performance.md).

Two measures, both at start-up:

* :func:`set_young_objects_max` sets ``gc_young_objects_max``, CPython's ``threshold0``: the
  container objects allocated (net of those freed) before the youngest generation is examined
  (700 by default). Fewer young collections promote fewer short-lived objects (a call's, alive
  only while it runs) to the older generations, and so trigger fewer full collections. The
  cost is memory: cyclic garbage waits a little longer to be found.
* :func:`freeze_loaded_objects`, once the logs are open and before serving, moves every object
  tracked so far to CPython's permanent generation (``gc.freeze``): no collection scans them
  again. An object loaded then that later becomes cyclic garbage is never collected; that
  leak is bounded by what start-up loaded, and the storage engine's objects are freed by
  reference counting (a deleted topic's partitions leave no cycle behind, tested).

Concurrency: call both from the main thread, at start-up.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["freeze_loaded_objects", "set_young_objects_max"]

logger = logging.getLogger(__name__)


def set_young_objects_max(young_objects_max: int) -> bool:
    """Set the collector's ``threshold0`` to ``young_objects_max``, keeping the other two;
    True if applied. 0 leaves CPython's default (returns False).

    Raises:
        ValueError: ``young_objects_max`` negative.
    """
    if young_objects_max < 0:
        raise ValueError(f"young_objects_max must be >= 0, got {young_objects_max}")
    if young_objects_max == 0:
        return False
    _, threshold1, threshold2 = gc.get_threshold()
    gc.set_threshold(young_objects_max, threshold1, threshold2)
    return True


def freeze_loaded_objects() -> int:
    """Collect what is garbage now, then move every object the collector tracks to the
    permanent generation, never scanned again; returns how many objects that was. O(objects
    tracked), once."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("garbage collector: %d objects loaded at start-up frozen (never scanned)",
                frozen)
    return frozen
