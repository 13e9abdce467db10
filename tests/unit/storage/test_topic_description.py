"""topic_description: what describe reports of a partition, its largest timestamp read without
opening the time index of an inactive segment (moved from test_log_manager.py with the code)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.storage.manager_helpers import T0, Clock, batch, open_manager


def test_describe_reads_max_timestamps_without_opening_indexes(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 1, {"segment.bytes": str(len(batch(b"x")))})
    partition_log = manager.get_log("t", 0)
    for timestamp in (T0 + 5, T0 + 50, T0 + 7):  # one batch per segment; the largest in the middle
        partition_log.append(batch(b"x", timestamp=timestamp))
    manager.close()
    manager = open_manager(dirs, clock)
    try:
        description = manager.describe_topic("t").partitions[0]
        assert (description.segment_count, description.max_timestamp) == (3, T0 + 50)
        segments = list(manager.get_log("t", 0).segments)
        assert [s.indexes_loaded for s in segments[:-1]] == [(False, False)] * 2
    finally:
        manager.close()
