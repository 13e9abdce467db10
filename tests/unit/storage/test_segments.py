"""Segments: the sorted base-offset map (Kafka LogSegments; docs/kafka-behaviours.md#segment-map);
ports of Kafka's LogSegmentsTest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.files import log_file
from stratalog.server.storage.segment import Segment
from stratalog.server.storage.segments import Segments

CONFIG = LogConfig(segment_index_bytes=1024)


def make(directory: Path, base_offset: int) -> Segment:
    return Segment.create(directory, base_offset, CONFIG)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path


def test_empty(directory: Path) -> None:
    segments = Segments()
    assert len(segments) == 0
    assert not segments
    assert segments.first is None and segments.last is None and segments.active is None
    assert segments.floor_segment(5) is None
    assert segments.values(0, 10) == []
    assert segments.non_active_from(0) == []
    assert segments.size_bytes == 0


def test_basic_operations(directory: Path) -> None:
    # LogSegmentsTest.testBasicOperations
    segments = Segments()
    seg1 = make(directory, 1)
    assert segments.add(seg1) is None
    assert len(segments) == 1 and 1 in segments and segments.get(1) is seg1
    # Adding a segment with the same base offset replaces it (Kafka LogSegments;
    # docs/kafka-behaviours.md#segment-map).
    seg1_dup = Segment.create(directory, 1, CONFIG, file_suffix=".dup")
    assert segments.add(seg1_dup) is seg1
    assert segments.get(1) is seg1_dup
    assert len(segments) == 1
    seg2 = make(directory, 2)
    segments.add(seg2)
    assert segments.base_offsets() == [1, 2]
    assert segments.remove(1) is seg1_dup
    assert segments.remove(1) is None
    assert segments.base_offsets() == [2]
    assert segments.clear() == [seg2]
    assert len(segments) == 0


def test_first_last_active_iteration(directory: Path) -> None:
    segments = Segments([make(directory, base) for base in (5, 1, 3)])
    assert [segment.base_offset for segment in segments] == [1, 3, 5]
    assert segments.first is not None and segments.first.base_offset == 1
    assert segments.last is segments.active
    assert segments.active is not None and segments.active.base_offset == 5


def test_floor_lower_higher(directory: Path) -> None:
    # LogSegmentsTest.testSegmentAccess / testClosestMatchOperations
    segments = Segments([make(directory, base) for base in (1, 3, 5, 7)])

    def base(segment: Segment | None) -> int | None:
        return None if segment is None else segment.base_offset

    assert base(segments.floor_segment(0)) is None
    assert base(segments.floor_segment(1)) == 1
    assert base(segments.floor_segment(2)) == 1
    assert base(segments.floor_segment(7)) == 7
    assert base(segments.floor_segment(100)) == 7
    assert base(segments.lower_segment(1)) is None
    assert base(segments.lower_segment(3)) == 1
    assert base(segments.lower_segment(4)) == 3
    assert base(segments.higher_segment(0)) == 1
    assert base(segments.higher_segment(1)) == 3
    assert base(segments.higher_segment(6)) == 7
    assert base(segments.higher_segment(7)) is None
    assert [s.base_offset for s in segments.higher_segments(3)] == [5, 7]
    assert [s.base_offset for s in segments.higher_segments(0)] == [1, 3, 5, 7]
    assert segments.higher_segments(7) == []


def test_values_range_rules(directory: Path) -> None:
    # LogSegmentsTest.testSegmentsFromRange: from the floor of `from` to bases < `to`.
    segments = Segments([make(directory, base) for base in (1, 3, 5, 7)])

    def bases(values: list[Segment]) -> list[int]:
        return [segment.base_offset for segment in values]

    assert bases(segments.values()) == [1, 3, 5, 7]
    assert bases(segments.values(3, 3)) == []  # from == to: empty
    assert bases(segments.values(0, 1)) == []  # nothing below 1
    assert bases(segments.values(0, 2)) == [1]  # from below the first: from the first
    assert bases(segments.values(2, 6)) == [1, 3, 5]  # floor of 2 is 1
    assert bases(segments.values(3, 7)) == [3, 5]
    assert bases(segments.values(4, 100)) == [3, 5, 7]
    assert bases(segments.values(8, 100)) == [7]
    with pytest.raises(ValueError, match="below"):
        segments.values(5, 4)


def test_non_active_from(directory: Path) -> None:
    # LogSegmentsTest.testNonActiveLogSegmentsFrom
    segments = Segments([make(directory, base) for base in (1, 3, 5)])
    assert [s.base_offset for s in segments.non_active_from(0)] == [1, 3]
    assert [s.base_offset for s in segments.non_active_from(4)] == [3]
    assert segments.non_active_from(5) == []  # from the active segment: nothing before it
    assert segments.non_active_from(6) == []


def test_size_bytes_sums_beyond_int32(directory: Path) -> None:
    # LogSegmentsTest.testSizeForLargeLogs: the total is a long. Two sparse 2 GiB - 1 files.
    big = 2**31 - 1
    for base in (0, 100):
        with open(log_file(directory, base), "wb") as handle:
            os.ftruncate(handle.fileno(), big)
    segments = Segments([Segment.open(directory, base, CONFIG) for base in (0, 100)])
    assert segments.size_bytes == 2 * big


def test_readers_keep_their_snapshot(directory: Path) -> None:
    # Copy-on-write: an iteration started before a mutation sees the old map, whole.
    segments = Segments([make(directory, base) for base in (1, 3)])
    iterator = iter(segments)
    segments.add(make(directory, 5))
    segments.remove(1)
    assert [s.base_offset for s in iterator] == [1, 3]
    assert segments.base_offsets() == [3, 5]


def test_floor_lookups_follow_every_mutation(directory: Path) -> None:
    # Floor lookups bisect lists copied from the map on first use: each mutation publishes a
    # new map, and the next lookup must see it, whatever the mutation was.
    segments = Segments([make(directory, base) for base in (0, 10)])
    assert segments.floor_segment(15).base_offset == 10  # type: ignore[union-attr]
    segments.add(make(directory, 20))
    assert segments.floor_segment(25).base_offset == 20  # type: ignore[union-attr]
    replacement = make(directory, 5)
    segments.add(replacement)
    assert segments.floor_segment(7) is replacement
    removed = [segments.remove(10)]
    assert segments.floor_segment(15) is replacement
    removed += segments.remove_many([0, 5])
    assert segments.floor_segment(15) is None
    assert segments.floor_segment(21).base_offset == 20  # type: ignore[union-attr]
    removed += segments.clear()
    assert segments.floor_segment(21) is None
    for segment in removed:
        segment.close()  # type: ignore[union-attr]


@settings(max_examples=100, deadline=None)
@given(
    bases=st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True),
    probes=st.lists(st.integers(-5, 1005), min_size=1, max_size=20),
)
def test_lookups_match_a_sorted_list_model(
    tmp_path_factory: pytest.TempPathFactory, bases: list[int], probes: list[int]
) -> None:
    directory = tmp_path_factory.mktemp("segments")
    segments = Segments([make(directory, base) for base in bases])
    model = sorted(bases)
    for probe in probes:
        floor = max((b for b in model if b <= probe), default=None)
        lower = max((b for b in model if b < probe), default=None)
        higher = min((b for b in model if b > probe), default=None)
        found_floor = segments.floor_segment(probe)
        found_lower = segments.lower_segment(probe)
        found_higher = segments.higher_segment(probe)
        assert (found_floor and found_floor.base_offset) == (floor if floor is not None else None)
        assert (found_lower and found_lower.base_offset) == (lower if lower is not None else None)
        assert (found_higher and found_higher.base_offset) == (
            higher if higher is not None else None
        )
        assert [s.base_offset for s in segments.higher_segments(probe)] == [
            b for b in model if b > probe
        ]
        for to in (probe, probe + 3, probe + 500):
            expected_start = floor if floor is not None else model[0]
            expected = [b for b in model if expected_start <= b < to] if to != probe else []
            assert [s.base_offset for s in segments.values(probe, to)] == expected
    for segment in segments:
        segment.close()
