"""LogManager: log directories, topics (create, delete, list, describe, alter), persisted configs,
placement, checkpoints and markers at close, background jobs, and the server defaults."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from stratalog.server.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from stratalog.server.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE, marker_exists
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    InvalidTopicError,
    LogClosedError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.log_defaults import parse_server_defaults
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.meta_properties import read_meta_properties
from stratalog.server.storage.topic_catalog import (
    CATALOG_FILE,
    TopicCatalog,
    TopicEntry,
    parse_catalog,
)
from tests.unit.storage.manager_helpers import T0, Clock, batch, open_manager

# -------------------------------------------------------------------- opening and closing


def test_open_creates_locks_and_identifies_directories(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    try:
        assert manager.log_dirs == [d.resolve() for d in dirs]
        for directory in dirs:
            assert (directory / ".lock").exists()
            assert (directory / RECOVERY_POINT_CHECKPOINT_FILE).exists()
            assert (directory / LOG_START_OFFSET_CHECKPOINT_FILE).exists()
        metas = [read_meta_properties(d) for d in dirs]
        assert all(meta is not None for meta in metas)
        assert metas[0].cluster_id == metas[1].cluster_id  # type: ignore[union-attr]
        assert metas[0].directory_id != metas[1].directory_id  # type: ignore[union-attr]
        with pytest.raises(LogDirLockedError):
            LogManager.open([dirs[1]], time_ms=clock)
    finally:
        manager.close()
    # Unlocked after close: a new manager opens.
    open_manager(dirs, clock).close()


def test_open_refuses_bad_directory_lists(dirs: list[Path], clock: Clock) -> None:
    with pytest.raises(InvalidConfigError, match="at least one"):
        LogManager.open([], time_ms=clock)
    with pytest.raises(InvalidConfigError, match="listed twice"):
        LogManager.open([dirs[0], dirs[0] / ".." / "d0"], time_ms=clock)
    with pytest.raises(InvalidConfigError, match="sequence"):
        LogManager.open(str(dirs[0]), time_ms=clock)  # type: ignore[arg-type]
    # A failed open leaves no directory locked.
    open_manager(dirs, clock).close()


def test_directories_of_different_clusters_are_refused(dirs: list[Path], clock: Clock) -> None:
    open_manager([dirs[0]], clock).close()
    open_manager([dirs[1]], clock).close()
    with pytest.raises(InvalidConfigError, match="different clusters"):
        open_manager(dirs, clock)
    open_manager([dirs[0]], clock).close()  # and nothing stays locked


def test_clean_and_unclean_shutdown_are_observable(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    assert manager.had_clean_shutdown == {d.resolve(): False for d in dirs}
    for directory in dirs:
        assert not marker_exists(directory)
    manager.close()
    for directory in dirs:
        assert marker_exists(directory)
    manager = open_manager(dirs, clock)
    assert manager.had_clean_shutdown == {d.resolve(): True for d in dirs}
    # The marker is consumed at open: a crash now must count as unclean.
    for directory in dirs:
        assert not (directory / CLEAN_SHUTDOWN_FILE).exists()
    manager.close()
    manager.close()  # idempotent


def test_closed_manager_refuses_work(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 1)
    partition_log = manager.get_log("t", 0)
    manager.close()
    assert partition_log.is_closed
    with pytest.raises(LogClosedError):
        manager.get_log("t", 0)
    with pytest.raises(LogClosedError):
        manager.create_topic("u", 1)
    assert manager.run_maintenance().flushed_logs == 0


# -------------------------------------------------------------------- topics


def test_create_describe_list_and_persist(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    description = manager.create_topic("orders", 3, {"segment.bytes": "1048576"})
    assert description.name == "orders"
    assert description.configs["segment.bytes"] == "1048576"
    assert description.configs["retention.ms"] == "604800000"  # a default, reported too
    assert set(description.configs) == set(LogConfig().to_mapping())
    assert [p.partition for p in description.partitions] == [0, 1, 2]
    for p in description.partitions:
        assert (p.log_start_offset, p.log_end_offset, p.size_bytes) == (0, 0, 0)
        assert p.segment_count == 1
        assert p.max_timestamp == -1
    manager.get_log("orders", 1).append(batch(b"a", b"b", timestamp=T0 + 5))
    manager.create_topic("audit", 1)
    assert [t.name for t in manager.list_topics()] == ["audit", "orders"]
    described = manager.describe_topic("orders").partitions[1]
    assert (described.log_end_offset, described.max_timestamp) == (2, T0 + 5)
    assert described.size_bytes > 0
    manager.close()

    manager = open_manager(dirs, clock)
    try:
        description = manager.describe_topic("orders")
        assert description.configs["segment.bytes"] == "1048576"
        assert manager.get_log("orders", 1).config.segment_bytes == 1048576
        assert description.partitions[1].log_end_offset == 2
        assert manager.get_log("orders", 1).read(0, 1 << 20)
    finally:
        manager.close()


def test_partitions_go_to_the_directory_with_the_fewest(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    try:
        manager.create_topic("a", 3)  # d0, d1, d0
        placed = [manager.log_dir_of("a", p) for p in range(3)]
        assert placed == [dirs[0].resolve(), dirs[1].resolve(), dirs[0].resolve()]
        manager.create_topic("b", 1)  # d1 has fewer
        assert manager.log_dir_of("b", 0) == dirs[1].resolve()
        assert (dirs[1] / "b-0").is_dir() and not (dirs[0] / "b-0").exists()
        described = manager.describe_topic("a").partitions
        assert [p.log_dir for p in described] == [str(d) for d in placed]
    finally:
        manager.close()


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "x" * 250, "sp ace", "nul\x00", "ümlaut"]
)
def test_create_refuses_bad_names(dirs: list[Path], clock: Clock, name: str) -> None:
    with open_manager(dirs, clock) as manager:
        with pytest.raises(InvalidTopicError):
            manager.create_topic(name, 1)
        assert manager.list_topics() == []
        for directory in dirs:
            assert not [p for p in directory.iterdir() if p.is_dir()]


def test_create_refuses_bad_counts_duplicates_and_collisions(
    dirs: list[Path], clock: Clock
) -> None:
    with open_manager(dirs, clock, **{"log.topic.partitions.max": "8"}) as manager:
        for count in (0, -1, 9):
            with pytest.raises(InvalidTopicError, match="partition"):
                manager.create_topic("t", count)
        with pytest.raises(InvalidTopicError):
            manager.create_topic("t", True)  # type: ignore[arg-type]
        manager.create_topic("a.b", 1)
        with pytest.raises(TopicAlreadyExistsError):
            manager.create_topic("a.b", 2)
        with pytest.raises(InvalidTopicError, match="collides"):
            manager.create_topic("a_b", 1)
        assert [t.name for t in manager.list_topics()] == ["a.b"]


def test_long_topic_names_are_limited_by_directory_names(dirs: list[Path], clock: Clock) -> None:
    with open_manager(dirs, clock, **{"log.topic.partitions.max": "200000"}) as manager:
        manager.create_topic("x" * 249, 2)  # "x...x-1" is 251 characters
        with pytest.raises(InvalidTopicError, match="255"):
            manager.create_topic("y" * 249, 100_001)
        assert [len(t.name) for t in manager.list_topics()] == [249]


def test_create_refuses_bad_configs(dirs: list[Path], clock: Clock) -> None:
    with open_manager(dirs, clock) as manager:
        with pytest.raises(InvalidConfigError, match=re.escape("no.such.config")):
            manager.create_topic("t", 1, {"no.such.config": "1"})
        with pytest.raises(InvalidConfigError, match=re.escape("segment.bytes")):
            manager.create_topic("t", 1, {"segment.bytes": "13"})
        with pytest.raises(InvalidConfigError, match=re.escape("retention.ms")):
            manager.create_topic("t", 1, {"retention.ms": "soon"})
        assert manager.list_topics() == []
        assert not (dirs[0] / "t-0").exists()


def test_unknown_topics_and_partitions(dirs: list[Path], clock: Clock) -> None:
    with open_manager(dirs, clock) as manager:
        manager.create_topic("t", 2)
        with pytest.raises(UnknownTopicOrPartitionError, match="unknown topic"):
            manager.get_log("nope", 0)
        with pytest.raises(UnknownTopicOrPartitionError, match=re.escape("partitions 0 .. 1")):
            manager.get_log("t", 2)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.get_log("t", -1)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.describe_topic("nope")
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.delete_topic("nope")
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.alter_topic_configs("nope", {"retention.ms": "1"})
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.delete_records("nope", 0, 0)


def test_delete_topic_renames_then_removes_after_the_delay(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock, **{"log.segment.delete.delay.ms": "1000"})
    try:
        manager.create_topic("t", 2)
        old_log = manager.get_log("t", 0)
        old_log.append(batch(b"x"))
        manager.delete_topic("t")
        assert old_log.is_closed
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.get_log("t", 0)
        assert manager.list_topics() == []
        assert not (dirs[0] / "t-0").exists() and not (dirs[1] / "t-1").exists()
        deleted = [p.name for d in dirs for p in d.iterdir() if p.name.endswith("-delete")]
        assert len(deleted) == 2 and all(name.startswith("t-") for name in deleted)
        assert len(manager.pending_deleted_dirs) == 2

        # The name is free again at once, and the new topic starts empty.
        manager.create_topic("t", 1)
        assert manager.get_log("t", 0).log_end_offset == 0

        report = manager.run_maintenance(clock.now_ms + 999)
        assert report.deleted_dirs_removed == 0
        report = manager.run_maintenance(clock.now_ms + 1000)
        assert report.deleted_dirs_removed == 2
        assert not [p for d in dirs for p in d.iterdir() if p.name.endswith("-delete")]
        assert manager.pending_deleted_dirs == []
    finally:
        manager.close()


def test_alter_configs_sets_deletes_persists_and_applies(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock, **{"log.retention.hours": "1"})
    manager.create_topic("t", 2, {"segment.bytes": "2000000", "retention.ms": "5000"})
    description = manager.alter_topic_configs(
        "t", {"flush.messages": "10", "segment.bytes": "3000000"}, ["retention.ms"]
    )
    assert description.configs["flush.messages"] == "10"
    assert description.configs["segment.bytes"] == "3000000"
    assert description.configs["retention.ms"] == "3600000"  # back to the server default
    assert description.overridden_configs == ("flush.messages", "segment.bytes")
    for partition in (0, 1):
        config = manager.get_log("t", partition).config
        assert (config.flush_messages, config.segment_bytes, config.retention_ms) == (
            10, 3000000, 3600000
        )
    with pytest.raises(InvalidConfigError, match="unknown"):
        manager.alter_topic_configs("t", {}, ["no.such"])
    with pytest.raises(InvalidConfigError, match="both set and deleted"):
        manager.alter_topic_configs("t", {"retention.ms": "1"}, ["retention.ms"])
    with pytest.raises(InvalidConfigError, match=re.escape("segment.index.bytes")):
        manager.alter_topic_configs("t", {"segment.index.bytes": "3"})
    assert manager.describe_topic("t").configs["segment.bytes"] == "3000000"  # unchanged
    manager.close()

    # Overrides persist; defaults come from the server's settings at each start.
    manager = open_manager(dirs, clock, **{"log.retention.hours": "2"})
    try:
        configs = manager.describe_topic("t").configs
        assert manager.describe_topic("t").overridden_configs == (
            "flush.messages", "segment.bytes")
        assert configs["flush.messages"] == "10"
        assert configs["retention.ms"] == "7200000"
    finally:
        manager.close()


# -------------------------------------------------------------------- crash leftovers


def test_interrupted_deletion_is_completed_at_open(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("gone", 2)
    manager.create_topic("kept", 1)
    manager.close()
    # A crash after the catalogue said "deleting" and before the directories were renamed.
    for directory in dirs:
        path = directory / CATALOG_FILE
        document = json.loads(path.read_text())
        for topic in document["topics"]:
            if topic["name"] == "gone":
                topic["state"] = "deleting"
        path.write_text(json.dumps(document))
    manager = open_manager(dirs, clock)
    try:
        assert [t.name for t in manager.list_topics()] == ["kept"]
        assert not (dirs[0] / "gone-0").exists() and not (dirs[1] / "gone-1").exists()
        assert len(manager.pending_deleted_dirs) == 2
    finally:
        manager.close()


def test_missing_partition_directories_are_created_at_open(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 3)
    manager.close()
    # As if the crash came after the catalogue write and before the directories.
    for path in (dirs[1] / "t-1", dirs[0] / "t-2"):
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    manager = open_manager(dirs, clock)
    try:
        assert [p.partition for p in manager.describe_topic("t").partitions] == [0, 1, 2]
        assert manager.get_log("t", 2).log_end_offset == 0
    finally:
        manager.close()


def test_partition_directories_without_catalogue_are_adopted(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 2)
    manager.get_log("t", 1).append(batch(b"kafka"))
    manager.close()
    for directory in dirs:
        (directory / CATALOG_FILE).unlink()  # a directory written by Kafka has none
    (dirs[0] / "lost+found").mkdir()  # not a partition: ignored
    manager = open_manager(dirs, clock, **{"log.segment.bytes": "1048576"})
    try:
        description = manager.describe_topic("t")
        assert [p.partition for p in description.partitions] == [0, 1]
        assert description.configs["segment.bytes"] == "1048576"
        assert manager.get_log("t", 1).log_end_offset == 1
        assert (dirs[0] / CATALOG_FILE).exists()
    finally:
        manager.close()


def test_a_partition_in_two_directories_is_refused(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 1)
    manager.close()
    (dirs[1] / "t-0").mkdir()
    with pytest.raises(StorageError, match="two log directories"):
        open_manager(dirs, clock)
    (dirs[1] / "t-0").rmdir()
    open_manager(dirs, clock).close()


def test_newest_catalogue_copy_wins_and_corrupt_copies_are_skipped(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("a", 1)
    old_copy = (dirs[1] / CATALOG_FILE).read_bytes()
    manager.create_topic("b", 1)
    manager.close()
    (dirs[1] / CATALOG_FILE).write_bytes(old_copy)  # a directory that missed the last change
    (dirs[0] / CATALOG_FILE).write_bytes(b"{garbage")
    # d0's copy is corrupt, d1's is old: the topics found on disk still come back (b adopted).
    manager = open_manager(dirs, clock)
    try:
        assert [t.name for t in manager.list_topics()] == ["a", "b"]
    finally:
        manager.close()
    for directory in dirs:
        (directory / CATALOG_FILE).write_bytes(b'{"version": 7}')
    with pytest.raises(CorruptCheckpointError, match="version"):
        open_manager(dirs, clock)


# -------------------------------------------------------------------- checkpoints and jobs


def test_close_writes_checkpoints_then_markers(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 2)
    manager.get_log("t", 0).append(batch(b"a", b"b", b"c"))
    manager.close()
    recovery_points = OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE).read()
    assert recovery_points == {("t", 0): 3}
    assert OffsetCheckpointFile(dirs[1] / RECOVERY_POINT_CHECKPOINT_FILE).read() == {("t", 1): 0}
    # No partition has its log start offset above its first segment: nothing to record.
    assert OffsetCheckpointFile(dirs[0] / LOG_START_OFFSET_CHECKPOINT_FILE).read() == {}


def test_delete_records_validates_the_offset(dirs: list[Path], clock: Clock) -> None:
    with open_manager(dirs, clock) as manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(batch(b"a", b"b"))
        with pytest.raises(OffsetOutOfRangeError):
            manager.delete_records("t", 0, 3)
        with pytest.raises(OffsetOutOfRangeError):
            manager.delete_records("t", 0, -2)
        assert manager.get_log("t", 0).log_start_offset == 0


def test_delete_records_moves_the_start_and_survives_restarts(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 1)
    partition_log = manager.get_log("t", 0)
    partition_log.append(batch(b"a", b"b", b"c"))
    assert manager.delete_records("t", 0, 2) == 2
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(1, 1000)
    assert partition_log.read(2, 1000)
    assert manager.delete_records("t", 0, 1) == 2  # never moves down
    assert manager.describe_topic("t").partitions[0].log_start_offset == 2
    manager.close()
    checkpoint = OffsetCheckpointFile(dirs[0] / LOG_START_OFFSET_CHECKPOINT_FILE).read()
    assert checkpoint == {("t", 0): 2}

    manager = open_manager(dirs, clock)
    try:
        assert manager.get_log("t", 0).log_start_offset == 2
        assert manager.delete_records("t", 0, -1) == 3  # -1: the high watermark
    finally:
        manager.close()
    # Kill-like: the checkpoint is what survives; an unclean open still honours it.
    (dirs[0] / CLEAN_SHUTDOWN_FILE).unlink()
    manager = open_manager(dirs, clock)
    try:
        assert manager.get_log("t", 0).log_start_offset == 3
    finally:
        manager.close()


def test_unclean_restart_recovers_and_clean_restart_does_not(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 2, {"segment.bytes": "1048576"})
    for _ in range(3):
        manager.get_log("t", 0).append(batch(b"x" * 100))
    manager.close()
    manager = open_manager(dirs, clock)
    assert manager.recovered_segments == 0
    manager.close()

    # A crash: no marker, and a torn batch at the end of partition 0's active segment.
    for directory in dirs:
        (directory / CLEAN_SHUTDOWN_FILE).unlink()
    active = dirs[0] / "t-0" / "00000000000000000000.log"
    with active.open("ab") as f:
        f.write(batch(b"torn")[:30])
    manager = open_manager(dirs, clock)
    try:
        assert manager.had_clean_shutdown == {d.resolve(): False for d in dirs}
        # Both partitions' active segments were scanned; the torn bytes are gone.
        assert manager.recovered_segments == 2
        partition_log = manager.get_log("t", 0)
        assert partition_log.log_end_offset == 3
        assert partition_log.append(batch(b"next")).first_offset == 3
    finally:
        manager.close()


# -------------------------------------------------------------------- server defaults


def test_server_defaults_follow_kafkas_broker_names() -> None:
    config, settings = parse_server_defaults(
        {
            "log.segment.bytes": "1048576",
            "log.retention.hours": "1",
            "log.retention.minutes": "2",  # minutes win over hours
            "log.roll.hours": "3",
            "log.segment.delete.delay.ms": "5",
            "log.flush.interval.messages": "7",
            "log.flush.scheduler.interval.ms": "9",  # flush.ms when log.flush.interval.ms unset
            "log.index.interval.bytes": "100",
            "log.message.timestamp.type": "LogAppendTime",
            "log.retention.check.interval.ms": "11",
            "log.flush.offset.checkpoint.interval.ms": "12",
            "num.recovery.threads.per.data.dir": "4",
        }
    )
    assert config.segment_bytes == 1048576
    assert config.retention_ms == 120_000
    assert config.segment_ms == 3 * 3_600_000
    assert config.file_delete_delay_ms == 5
    assert config.flush_messages == 7
    assert config.flush_ms == 9
    assert config.index_interval_bytes == 100
    assert config.message_timestamp_type.name == "LOG_APPEND_TIME"
    assert settings.retention_check_interval_ms == 11
    assert settings.flush_scheduler_interval_ms == 9
    assert settings.flush_offset_checkpoint_interval_ms == 12
    assert settings.recovery_threads_per_data_dir == 4

    config, _ = parse_server_defaults(
        {"log.retention.ms": "-5", "log.retention.hours": "1", "log.flush.interval.ms": "3",
         "log.flush.scheduler.interval.ms": "9", "retention.bytes": "10",
         "log.retention.bytes": "-7"}
    )
    assert config.retention_ms == -1  # negative means unlimited; ms wins over hours
    assert config.flush_ms == 3
    assert config.retention_bytes == 10  # a topic name wins over its broker name


@pytest.mark.parametrize(
    ("defaults", "match"),
    [
        ({"log.segment.bytez": "1"}, "log.segment.bytez"),
        ({"log.segment.bytes": "big"}, "segment.bytes"),
        ({"log.retention.check.interval.ms": "0"}, "at least 1"),
        ({"log.dirs": "/tmp"}, "log directories"),
        ({"log.retention.hours": "1.5"}, "log.retention.hours"),
    ],
)
def test_bad_server_defaults_are_refused(
    defaults: dict[str, str], match: str, dirs: list[Path], clock: Clock
) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        LogManager.open(dirs, defaults=defaults, time_ms=clock)
    open_manager(dirs, clock).close()  # nothing left locked


# -------------------------------------------------------------------- the catalogue file


@pytest.mark.parametrize(
    ("document", "match"),
    [
        (b"\xff", "UTF-8"),
        (b"[]", "not a JSON object"),
        (b'{"version":0,"generation":-1,"topics":[]}', "generation"),
        (b'{"version":0,"generation":true,"topics":[]}', "generation"),
        (b'{"version":0,"generation":1,"topics":{}}', "not a list"),
        (b'{"version":0,"generation":1,"topics":[{"name":"../x","partitions":1}]}', "name"),
        (b'{"version":0,"generation":1,"topics":[{"name":"a","partitions":0}]}', "partition"),
        (b'{"version":0,"generation":1,"topics":[{"name":"a","partitions":1,"configs":{"k":1}}]}',
         "strings"),
        (b'{"version":0,"generation":1,"topics":[{"name":"a","partitions":1,"state":"x"}]}',
         "state"),
        (b'{"version":0,"generation":1,"topics":[{"name":"a","partitions":1},'
         b'{"name":"a","partitions":2}]}', "twice"),
    ],
)
def test_the_catalogue_is_parsed_strictly(document: bytes, match: str, tmp_path: Path) -> None:
    with pytest.raises(CorruptCheckpointError, match=match) as caught:
        parse_catalog(document, tmp_path / CATALOG_FILE)
    assert caught.value.path == str(tmp_path / CATALOG_FILE)


def test_the_catalogue_round_trips() -> None:
    catalog = TopicCatalog().with_topic(TopicEntry("b", 2, {"retention.ms": "5"}))
    catalog = catalog.with_topic(TopicEntry("a", 1, {}, "deleting")).without_topic("zz")
    assert catalog.generation == 3
    data = catalog.to_bytes()
    assert parse_catalog(data, Path("x")) == catalog
    assert data.startswith(b'{"version":0,"generation":3,"topics":[{"name":"a"')


# -------------------------------------------------------------------- CreatePartitions (issue 25)


def test_create_partitions_grows_keeps_the_data_and_persists(dirs: list[Path], clock: Clock) -> None:
    from stratalog.server.storage.errors import InvalidPartitionsError

    manager = open_manager(dirs, clock)
    try:
        manager.create_topic("grow", 2, {"segment.bytes": "1048576"})
        manager.get_log("grow", 1).append(batch(b"kept"))
        grown = manager.create_partitions("grow", 5)
        assert [p.partition for p in grown.partitions] == [0, 1, 2, 3, 4]
        assert [p.log_end_offset for p in grown.partitions] == [0, 1, 0, 0, 0]
        assert manager.get_log("grow", 4).config.segment_bytes == 1048576
        # Placed as a new topic's partitions: on the directory holding the fewest.
        assert sorted(len(list(d.glob("grow-*"))) for d in dirs) == [2, 3]
        for count in (5, 4, 0):
            with pytest.raises(InvalidPartitionsError, match="can only be added"):
                manager.create_partitions("grow", count)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.create_partitions("nope", 3)
    finally:
        manager.close()
    manager = open_manager(dirs, clock)
    try:
        assert manager.describe_topic("grow").partitions[4].log_end_offset == 0
        assert [p.log_end_offset for p in manager.describe_topic("grow").partitions] == [
            0, 1, 0, 0, 0]
    finally:
        manager.close()


def test_a_crash_between_the_catalogue_and_the_directories_completes_the_grow(
        dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("grow", 1)
    manager.create_partitions("grow", 3)
    manager.close()
    # What a crash right after the catalogue write leaves: the count, not the directory.
    (lost,) = [d / "grow-2" for d in dirs if (d / "grow-2").is_dir()]
    shutil.rmtree(lost)
    manager = open_manager(dirs, clock)
    try:
        assert [p.partition for p in manager.describe_topic("grow").partitions] == [0, 1, 2]
        assert manager.get_log("grow", 2).append(batch(b"x")).first_offset == 0
    finally:
        manager.close()


def test_a_failed_grow_is_removed_again(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock)
    try:
        manager.create_topic("grow", 2)  # one partition in each directory
        # Where the new partition 3 would go (d1, after 2 went to d0), a file: its log
        # cannot be created.
        (dirs[1] / "grow-3").write_bytes(b"in the way")
        with pytest.raises(StorageError):
            manager.create_partitions("grow", 4)
        assert manager.describe_topic("grow").partitions[-1].partition == 1
        assert not (dirs[0] / "grow-2").exists()  # renamed for deletion
        assert manager.create_partitions("grow", 3).partitions[-1].partition == 2
    finally:
        manager.close()
