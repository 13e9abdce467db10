"""Model-based test of PartitionLog: random appends, rolls, truncations, reopens, reads and
timestamp lookups, checked after every step against a plain list of batches.

The model knows only Kafka's rules, stated in terms of batches and segments:

* an append goes to a new segment at the log end when ``active size + append size >
  segment.bytes`` (Kafka UnifiedLog.maybeRoll and LogSegment.shouldRoll;
  docs/kafka-behaviours.md#roll); an explicit roll starts one at the log end, replacing an empty
  active segment at that offset (Kafka LocalLog.roll; docs/kafka-behaviours.md#roll);
* ``truncate_to(k)`` drops segments based above ``k`` and every batch whose last offset is
  ``>= k``; the log end becomes ``k`` (Kafka LogSegment.truncateTo and UnifiedLog.truncateTo;
  docs/kafka-behaviours.md#truncation); below the first segment, everything restarts at ``k`` (Kafka
  UnifiedLog.truncateFullyAndStartAt; docs/kafka-behaviours.md#truncation);
* a reopened log ends after its last batch, or at its last segment's base (Kafka
* LogSegment.readNextOffset; docs/kafka-behaviours.md#log-loading); ``read(o, n)`` returns, from the
* floor segment of ``o`` on (skipping segments without a batch
  reaching ``o``), the first batch whose last offset is ``>= o`` and the following batches of
  that segment while the total stays ``<= n`` (Kafka UnifiedLog.read, LocalLog.read and
  LogSegment.read; docs/kafka-behaviours.md#reads);
* ``offset_for_timestamp(T)`` is the earliest record with timestamp ``>= T`` (Kafka
* UnifiedLog.fetchOffsetByTimestamp; docs/kafka-behaviours.md#timestamp-lookup) and -3
  the first record holding the largest timestamp.

Timestamps are far in the future (year 2096) so that a segment without timestamps, judged by
its file's mtime (Kafka LogSegment.largestTimestamp; docs/kafka-behaviours.md#timestamp-lookup),
never looks newer than a record: that quirk has its own unit test.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from stratalog.records.batch import Compression
from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.storage import LogConfig, OffsetOutOfRangeError, PartitionLog

T0 = 4_000_000_000_000  # 2096: later than any file mtime the test machine will produce
SEGMENT_BYTES = 700


@dataclass
class ModelBatch:
    base_offset: int
    timestamps: list[int]  # as a reader sees them
    size_bytes: int
    segment: int  # base offset of the segment holding it

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.timestamps) - 1


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


batch_timestamps = st.lists(
    st.one_of(st.integers(0, 60).map(lambda d: T0 + d), st.just(-1)), min_size=1, max_size=4
)


class PartitionLogMachine(RuleBasedStateMachine):
    log_append_time = False

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="stratalog-model-"))
        self.directory = self.tmp / "t-0"
        self.clock = Clock()
        self.log: PartitionLog | None = None
        self.batches: list[ModelBatch] = []
        self.segment_bases = [0]
        self.log_end_offset = 0
        self.log_start_offset = 0

    @initialize(index_interval_bytes=st.sampled_from([0, 1, 100, 300, 4096]))
    def open(self, index_interval_bytes: int) -> None:
        self.config = LogConfig(
            segment_bytes=SEGMENT_BYTES,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=8192,
            file_delete_delay_ms=0,
            message_timestamp_type=1 if self.log_append_time else 0,  # type: ignore[arg-type]
        )
        self.log = PartitionLog.open(self.directory, self.config, time_ms=self.clock)

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---------------------------------------------------------------- model helpers

    def active_size(self) -> int:
        active = self.segment_bases[-1]
        return sum(b.size_bytes for b in self.batches if b.segment == active)

    def records(self) -> list[tuple[int, int]]:
        """(offset, timestamp) of every record, in offset order."""
        return [
            (batch.base_offset + i, ts)
            for batch in self.batches
            for i, ts in enumerate(batch.timestamps)
        ]

    # ---------------------------------------------------------------- rules

    @rule(
        batches=st.lists(batch_timestamps, min_size=1, max_size=3),
        codec=st.sampled_from(list(Compression)),
        advance_ms=st.integers(0, 5),
    )
    def append(self, batches: list[list[int]], codec: Compression, advance_ms: int) -> None:
        assert self.log is not None
        self.clock.now_ms += advance_ms
        encoded = [
            build_batch([(ts, None, b"v%d" % i, ()) for i, ts in enumerate(timestamps)],
                        compression=codec)
            for timestamps in batches
        ]
        size = sum(len(data) for data in encoded)
        info = self.log.append(b"".join(encoded))
        if self.active_size() + size > SEGMENT_BYTES:
            self.segment_bases.append(self.log_end_offset)
        offset = self.log_end_offset
        for timestamps, data in zip(batches, encoded, strict=True):
            if self.log_append_time:
                timestamps = [self.clock.now_ms] * len(timestamps)
            self.batches.append(ModelBatch(offset, timestamps, len(data),
                                           self.segment_bases[-1]))
            offset += len(timestamps)
        assert (info.first_offset, info.last_offset) == (self.log_end_offset, offset - 1)
        self.log_end_offset = offset

    @rule()
    def roll(self) -> None:
        assert self.log is not None
        self.log.roll()
        if self.segment_bases[-1] != self.log_end_offset:
            self.segment_bases.append(self.log_end_offset)

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        assert self.log is not None
        target = data.draw(st.integers(0, self.log_end_offset + 2), label="target")
        changed = self.log.truncate_to(target)
        assert changed == (target < self.log_end_offset)
        if not changed:
            return
        if self.segment_bases[0] > target:
            self.batches = []
            self.segment_bases = [target]
            self.log_start_offset = target
        else:
            self.segment_bases = [base for base in self.segment_bases if base <= target]
            self.batches = [b for b in self.batches if b.last_offset < target]
            self.log_start_offset = min(self.log_start_offset, target)
        self.log_end_offset = target

    @rule()
    def reopen(self) -> None:
        assert self.log is not None
        self.log.close()
        self.log = PartitionLog.open(self.directory, self.config, time_ms=self.clock)
        active = self.segment_bases[-1]
        in_active = [b for b in self.batches if b.segment == active]
        self.log_end_offset = in_active[-1].last_offset + 1 if in_active else active

    @rule(
        data=st.data(),
        max_bytes=st.sampled_from([0, 1, 80, 200, 500, 5000]),
        min_one_message=st.booleans(),
    )
    def read(self, data: st.DataObject, max_bytes: int, min_one_message: bool) -> None:
        assert self.log is not None
        offset = data.draw(
            st.integers(self.log_start_offset - 1, self.log_end_offset + 1), label="offset"
        )
        if offset < self.log_start_offset or offset > self.log_end_offset:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes, min_one_message=min_one_message)
            return
        got = self.log.read(offset, max_bytes, min_one_message=min_one_message)
        assert [
            (header.base_offset, header.size_bytes, [r.timestamp for r in records])
            for header, records in iter_batches(got)
        ] == [(b.base_offset, b.size_bytes, b.timestamps) for b in self.expected_read(
            offset, max_bytes, min_one_message)]

    def expected_read(self, offset: int, max_bytes: int, min_one_message: bool) -> list[ModelBatch]:
        if offset == self.log_end_offset:
            return []
        floor = max(base for base in self.segment_bases if base <= offset)
        for segment in [base for base in self.segment_bases if base >= floor]:
            candidates = [
                b for b in self.batches if b.segment == segment and b.last_offset >= offset
            ]
            if not candidates:
                continue
            first = candidates[0]
            if not min_one_message and first.size_bytes > max_bytes:
                return []
            chosen, total = [first], first.size_bytes
            for batch in candidates[1:]:
                if total + batch.size_bytes > max(max_bytes, first.size_bytes if
                                                  min_one_message else 0):
                    break
                chosen.append(batch)
                total += batch.size_bytes
            return chosen
        return []

    @rule(timestamp=st.one_of(st.integers(-3, -1), st.integers(T0 - 5, T0 + 70)))
    def offset_for_timestamp(self, timestamp: int) -> None:
        assert self.log is not None
        records = self.records()
        found = self.log.offset_for_timestamp(timestamp)
        if timestamp == -1:
            expected: tuple[int, int] | None = (-1, self.log_end_offset)
        elif timestamp == -2:
            expected = (-1, self.log_start_offset)
        elif timestamp == -3:
            max_timestamp = max((ts for _, ts in records), default=-1)
            expected = next(
                ((ts, offset) for offset, ts in records if ts == max_timestamp and ts >= 0),
                None,
            )
        else:
            expected = next(
                (
                    (ts, offset)
                    for offset, ts in records
                    if ts >= timestamp and offset >= self.log_start_offset
                ),
                None,
            )
        assert (None if found is None else (found.timestamp, found.offset)) == expected

    # ---------------------------------------------------------------- invariants

    @invariant()
    def offsets_and_segments_match(self) -> None:
        if self.log is None:
            return
        assert self.log.log_end_offset == self.log_end_offset
        assert self.log.log_start_offset == self.log_start_offset
        assert self.log.segments.base_offsets() == self.segment_bases
        sizes = {base: 0 for base in self.segment_bases}
        for batch in self.batches:
            sizes[batch.segment] += batch.size_bytes
        assert [s.size_bytes for s in self.log.segments] == [sizes[b] for b in self.segment_bases]

    @precondition(lambda self: self.log is not None)
    @invariant()
    def indexes_are_consistent(self) -> None:
        assert self.log is not None
        for segment in self.log.segments:
            if segment.indexes_loaded[0]:
                segment.offset_index.check()
            if segment.indexes_loaded[1]:
                segment.time_index.check()


class LogAppendTimeMachine(PartitionLogMachine):
    log_append_time = True


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestPartitionLogModel = PartitionLogMachine.TestCase
TestPartitionLogModel.settings = SETTINGS
TestLogAppendTimeModel = LogAppendTimeMachine.TestCase
TestLogAppendTimeModel.settings = settings(SETTINGS, max_examples=25)
