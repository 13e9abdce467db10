"""The cleaner through the LogManager: clean_now, cleaner_status/stats, the checkpoint file,
the choice of the dirtiest log, the threads, pausing on delete; and a model test of random
appends, tombstones, rolls and cleanings against a key -> value dict."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.storage import PartitionLog
from stratalog.server.storage.cleaner import Cleaner, cleanable_range
from stratalog.server.storage.cleaner_manager import CLEANER_OFFSET_CHECKPOINT_FILE
from stratalog.server.storage.errors import (
    InvalidConfigError,
    LogNotCompactedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.log_defaults import parse_server_defaults
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.offset_map import OffsetMap

T0 = 1_700_000_000_000
DEFAULTS = {
    "log.cleaner.dedupe.buffer.size": "65536",
    "log.cleaner.backoff.ms": "10",
    "log.segment.bytes": "1024",
}


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def fill(manager: LogManager, topic: str, count: int, keys: int, partition: int = 0) -> None:
    log = manager.get_log(topic, partition)
    for i in range(count):
        log.append(build_batch([(T0 + i, b"k%d" % (i % keys), b"v%d" % i, ())]))


def all_records(log: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None]]:
    found = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetched = log.fetch(offset, 1 << 20)
        for _, batch_records in iter_batches(fetched.data):
            found.extend((r.offset, r.timestamp, r.key, r.value) for r in batch_records
                         if r.offset >= offset)
        if fetched.next_offset == offset:
            break
        offset = fetched.next_offset
    return found


def test_cleaner_settings_have_kafkas_names_and_defaults() -> None:
    _, server = parse_server_defaults({})
    assert (server.cleaner_enable, server.cleaner_threads, server.cleaner_dedupe_buffer_size,
            server.cleaner_io_buffer_size, server.cleaner_io_buffer_load_factor,
            server.cleaner_backoff_ms) == (True, 1, 134217728, 524288, 0.9, 15000)
    topic, server = parse_server_defaults({
        "log.cleaner.enable": "false", "log.cleaner.threads": "2",
        "log.cleaner.io.buffer.load.factor": "0.5", "log.cleaner.min.cleanable.ratio": "0.1",
        "log.cleaner.delete.retention.ms": "5", "log.cleaner.min.compaction.lag.ms": "7",
    })
    assert (server.cleaner_enable, server.cleaner_threads) == (False, 2)
    assert server.cleaner_io_buffer_load_factor == 0.5
    assert (topic.min_cleanable_dirty_ratio, topic.delete_retention_ms,
            topic.min_compaction_lag_ms) == (0.1, 5, 7)
    for bad in ({"log.cleaner.enable": "yes"}, {"log.cleaner.io.buffer.load.factor": "0"},
                {"log.cleaner.threads": "0"}):
        with pytest.raises(InvalidConfigError, match=r"log\.cleaner"):
            parse_server_defaults(bad)


def test_clean_now_cleans_checkpoints_and_reports(tmp_path: Path) -> None:
    clock = Clock()
    with LogManager.open([tmp_path], defaults=DEFAULTS, time_ms=clock) as manager:
        manager.create_topic("changelog", 1, configs={"cleanup.policy": "compact"})
        fill(manager, "changelog", 200, keys=5)
        log = manager.get_log("changelog", 0)
        before = manager.cleaner_status("changelog", 0)
        assert before.cleaned_offset == 0 and before.last_clean_ms == -1
        assert before.dirty_ratio == 1.0 and before.dirty_bytes == before.cleanable_bytes > 0
        assert not before.in_progress
        result = manager.clean_now("changelog", 0)
        assert (result.topic, result.partition) == ("changelog", 0)
        assert result.first_dirty_offset_before == 0
        assert result.end_offset == log.active_segment.base_offset
        assert result.records_kept < result.records_read
        after = manager.cleaner_status("changelog", 0)
        assert after.cleaned_offset == result.end_offset
        assert after.dirty_bytes == 0 and after.dirty_ratio == 0.0
        assert after.last_clean_ms == T0
        stats = manager.cleaner_stats()
        assert stats.cleanings == 1 and stats.last_run_ms == T0
        assert stats.bytes_read == result.bytes_read and stats.bytes_written == result.bytes_written
        assert stats.records_removed == result.records_read - result.records_kept
        checkpoint = (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text()
        assert checkpoint == f"0\n1\nchangelog 0 {result.end_offset}\n"
    # The checkpoint survives a restart.
    with LogManager.open([tmp_path], defaults=DEFAULTS, time_ms=clock) as manager:
        assert manager.cleaner_status("changelog", 0).cleaned_offset == result.end_offset


def test_clean_now_refuses_unknown_and_uncompacted_topics(tmp_path: Path) -> None:
    with LogManager.open([tmp_path], defaults=DEFAULTS) as manager:
        manager.create_topic("plain", 1)
        with pytest.raises(LogNotCompactedError, match=r"plain-0.*cleanup\.policy is delete"):
            manager.clean_now("plain", 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.clean_now("nope", 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.cleaner_status("plain", 3)


def test_compact_delete_topics_are_cleaned_and_retained(tmp_path: Path) -> None:
    clock = Clock()
    with LogManager.open([tmp_path], defaults=DEFAULTS, time_ms=clock) as manager:
        manager.create_topic("both", 1, configs={"cleanup.policy": "compact,delete",
                                                  "retention.ms": "1000"})
        fill(manager, "both", 100, keys=3)
        manager.clean_now("both", 0)
        log = manager.get_log("both", 0)
        assert len({r[2] for r in all_records(log)}) == 3
        clock.now_ms = T0 + 400_000  # past retention.ms and the retention check interval
        report = manager.run_maintenance()
        assert report.segments_deleted > 0 and log.log_start_offset > 0


def test_the_dirtiest_due_log_is_cleaned_first(tmp_path: Path) -> None:
    with LogManager.open([tmp_path], defaults=DEFAULTS) as manager:
        manager.create_topic("a", 1, configs={"cleanup.policy": "compact"})
        manager.create_topic("b", 1, configs={"cleanup.policy": "compact",
                                              "min.cleanable.dirty.ratio": "1"})
        manager.create_topic("plain", 1)
        fill(manager, "a", 100, keys=4)
        fill(manager, "b", 300, keys=4)
        fill(manager, "plain", 300, keys=4)
        cleaner = Cleaner(OffsetMap(1 << 14))
        first = manager.cleaner.clean_dirtiest(cleaner)
        # "b" is as dirty, but never over a ratio of 1; "plain" is not compacted.
        assert first is not None and first.topic == "a"
        assert manager.cleaner.clean_dirtiest(cleaner) is None  # nothing else due
        assert manager.cleaner_stats().max_dirty_ratio == 1.0  # "b" still is


def test_cleaner_threads_run_with_start_background_and_stop_on_close(tmp_path: Path) -> None:
    manager = LogManager.open([tmp_path], defaults=DEFAULTS)
    manager.create_topic("c", 1, configs={"cleanup.policy": "compact"})
    fill(manager, "c", 200, keys=2)
    manager.start_background()
    assert manager.cleaner.running
    threads = [t for t in threading.enumerate() if t.name.startswith("log-cleaner")]
    assert len(threads) == 1
    done = threading.Event()
    while not done.wait(0.01):  # a wait for the thread, not a timing assertion
        if manager.cleaner_stats().cleanings:
            done.set()
    manager.close()
    assert not any(t.is_alive() for t in threads)
    disabled = dict(DEFAULTS, **{"log.cleaner.enable": "false"})
    with LogManager.open([tmp_path], defaults=disabled) as manager:
        assert manager.start_cleaner() is False and not manager.cleaner.running


def test_deleting_a_topic_forgets_its_checkpoint(tmp_path: Path) -> None:
    with LogManager.open([tmp_path], defaults=DEFAULTS) as manager:
        for name in ("gone", "kept"):
            manager.create_topic(name, 1, configs={"cleanup.policy": "compact"})
            fill(manager, name, 100, keys=2)
            manager.clean_now(name, 0)
        manager.delete_topic("gone")
        text = (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text()
        assert "gone" not in text and "kept 0 " in text
        manager.create_topic("gone", 1, configs={"cleanup.policy": "compact"})
        assert manager.cleaner_status("gone", 0).cleaned_offset == 0


# ------------------------------------------------------------------------- the model test


class CompactionMachine(RuleBasedStateMachine):
    """Random keyed appends (values and tombstones), rolls and cleanings with a small offset
    map; after each step the log read from its start gives the model's key -> value map, and
    every record it holds is one that was appended, with its offset and timestamp."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp()) / "model-0"
        self.log = PartitionLog.open(
            self.directory,
            {"cleanup.policy": "compact", "segment.bytes": "600", "delete.retention.ms": "0"},
            time_ms=lambda: T0,
        )
        self.appended: dict[int, tuple[int, bytes, bytes | None]] = {}
        self.model: dict[bytes, bytes | None] = {}
        self.checkpoint: int | None = None

    @rule(
        key=st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
        value=st.one_of(st.none(), st.binary(min_size=0, max_size=30)),
        count=st.integers(1, 3),
    )
    def append(self, key: bytes, value: bytes | None, count: int) -> None:
        records = [(T0 + len(self.appended) + i, key, value, ()) for i in range(count)]
        info = self.log.append(build_batch(records))
        for i, (timestamp, _, _, _) in enumerate(records):
            self.appended[info.first_offset + i] = (timestamp, key, value)
        self.model[key] = value

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(map_slots=st.integers(2, 40))
    def clean(self, map_slots: int) -> None:
        cleanable = cleanable_range(self.log, self.checkpoint, T0)
        if cleanable.first_dirty_offset >= cleanable.first_uncleanable_offset:
            return
        cleaner = Cleaner(OffsetMap(24 * map_slots, load_factor=1.0))
        result = cleaner.clean(self.log, cleanable.first_dirty_offset,
                               cleanable.first_uncleanable_offset)
        self.checkpoint = result.end_offset

    @rule()
    def reopen(self) -> None:
        config = self.log.config
        self.log.close()
        self.log = PartitionLog.open(self.directory, config, time_ms=lambda: T0,
                                     had_clean_shutdown=False, recovery_point=0)

    @invariant()
    def log_matches_model(self) -> None:
        found = all_records(self.log)
        latest: dict[bytes, bytes | None] = {}
        for offset, timestamp, key, value in found:
            assert self.appended[offset] == (timestamp, key, value)
            latest[key] = value
        # A key whose tombstone was removed is absent; one whose tombstone stays maps to None.
        live = {k: v for k, v in latest.items() if v is not None}
        assert live == {k: v for k, v in self.model.items() if v is not None}
        assert [r[0] for r in found] == sorted({r[0] for r in found})

    def teardown(self) -> None:
        self.log.close()


TestCompaction = CompactionMachine.TestCase
TestCompaction.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
