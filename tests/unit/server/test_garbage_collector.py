"""The garbage collector's start-up settings (server/garbage_collector.py), and the claim its
freeze relies on: the storage engine's objects need no cyclic collection to be freed."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratalog.server.garbage_collector import freeze_loaded_objects, set_young_objects_max
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.segment import Segment


@pytest.fixture
def collector_restored() -> Iterator[None]:
    """The process's collector as the test found it: thresholds, enabled, nothing frozen."""
    thresholds = gc.get_threshold()
    enabled = gc.isenabled()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_young_objects_max_sets_threshold0_only(collector_restored: None) -> None:
    _, threshold1, threshold2 = gc.get_threshold()
    assert set_young_objects_max(12_345)
    assert gc.get_threshold() == (12_345, threshold1, threshold2)
    assert not set_young_objects_max(0)  # 0: left as it is
    assert gc.get_threshold() == (12_345, threshold1, threshold2)
    with pytest.raises(ValueError, match="must be >= 0"):
        set_young_objects_max(-1)


def test_freeze_moves_the_loaded_objects_out_of_every_collection(
    collector_restored: None,
) -> None:
    loaded = [[index] for index in range(1000)]  # containers the collector tracks
    frozen = freeze_loaded_objects()
    # Frozen objects that die leave the permanent generation: in a long test process another
    # thread (a gRPC poller of an earlier test) may drop some between the two counts.
    assert frozen >= gc.get_freeze_count() >= len(loaded)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(item) in tracked for item in loaded)  # no generation holds them now


def test_a_deleted_topics_storage_objects_are_freed_without_the_cyclic_collector(
    tmp_path: Path, collector_restored: None
) -> None:
    # The freeze at start-up relies on this: a partition loaded then and deleted later is
    # freed by reference counting, so freezing it leaks nothing.
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("gone", 20, {"segment.bytes": "1000"})
    manager.create_topic("kept", 1, {})
    manager.close()
    manager = LogManager.open([tmp_path / "data"])  # loaded at start-up, as a server's are

    def alive(kind: type) -> int:
        return sum(type(o) is kind for o in gc.get_objects())

    gc.collect()
    gc.disable()  # from here on, only reference counting frees anything
    assert alive(PartitionLog) == 21 and alive(Segment) >= 21
    manager.delete_topic("gone")
    assert alive(PartitionLog) == 1 and alive(Segment) == 1
    manager.close()
