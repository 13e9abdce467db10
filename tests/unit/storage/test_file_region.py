"""Segment.fetch_region and FileRegion (server/storage/file_region.py): the same whole batches as
Segment.fetch, without reading them; sent from a descriptor of their own; never sent once the
file was truncated."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records.builder import build_batch
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.file_region import FileRegion, RegionTruncatedError
from stratalog.server.storage.segment import Segment

T0 = 1_700_000_000_000


def config(index_interval_bytes: int) -> LogConfig:
    return LogConfig(segment_index_bytes=64 * 1024, index_interval_bytes=index_interval_bytes)


def fill(segment: Segment, sizes: list[tuple[int, int]], base_offset: int = 0) -> list[int]:
    """Append a batch per ``(records, value bytes)``; the base offset of each."""
    bases = []
    offset = base_offset
    for count, value_bytes in sizes:
        data = build_batch([(T0, None, b"v" * value_bytes, ())] * count, base_offset=offset)
        last = offset + count - 1
        segment.append(last, T0, last, data)
        bases.append(offset)
        offset += count
    return bases


def region_bytes(fetched_data: object) -> bytes:
    if isinstance(fetched_data, FileRegion):
        try:
            return fetched_data.read()
        finally:
            fetched_data.close()
    return bytes(fetched_data)  # type: ignore[call-overload]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 20), st.integers(0, 3000)), min_size=1, max_size=40),
    index_interval_bytes=st.sampled_from([1, 512, 4096, 64 * 1024]),
    data=st.data(),
)
def test_a_region_holds_the_same_batches_as_a_fetch(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[tuple[int, int]],
    index_interval_bytes: int, data: st.DataObject,
) -> None:
    segment = Segment.create(tmp_path_factory.mktemp("seg"), 100, config(index_interval_bytes))
    try:
        fill(segment, sizes, 100)
        end_offset = 100 + sum(count for count, _ in sizes)
        for _ in range(10):
            offset = data.draw(st.integers(100, end_offset - 1))
            max_bytes = data.draw(st.integers(0, segment.size_bytes + 100))
            min_one = data.draw(st.booleans())
            region_min = data.draw(st.sampled_from([0, 1, 10_000, 1 << 30]))
            expected = segment.fetch(offset, max_bytes, None, min_one)
            got = segment.fetch_region(offset, max_bytes, None, min_one, None, region_min)
            assert expected is not None and got is not None
            assert got.next_offset == expected.next_offset
            if region_min <= len(expected.data) and expected.data:
                assert isinstance(got.data, FileRegion)
            assert region_bytes(got.data) == bytes(expected.data)
            # Without compaction the offsets spanned are the records.
            assert got.records_count == expected.records_count
    finally:
        segment.close()


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 2000)), min_size=2,
                      max_size=30), data=st.data())
def test_a_region_stops_before_the_batch_holding_its_stop_offset(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[tuple[int, int]],
    data: st.DataObject,
) -> None:
    segment = Segment.create(tmp_path_factory.mktemp("seg"), 0, config(1024))
    try:
        bases = fill(segment, sizes)
        stop = data.draw(st.sampled_from(bases))
        # A bound inside a batch keeps that batch (fetch_isolation.py's rule): the same cut as
        # a bound at the next batch's start.
        inside = data.draw(st.booleans())
        end_offset = bases[-1] + sizes[-1][0]
        if inside and stop > 0 and sizes[bases.index(stop) - 1][0] > 1:
            stop_asked = stop - 1  # the previous batch holds it, not as its first offset
        else:
            stop_asked = stop
        offset = data.draw(st.integers(0, bases[-1]))
        got = segment.fetch_region(offset, 1 << 30, None, True, stop_asked, 0)
        expected = segment.fetch(offset, 1 << 30, None, True)
        assert got is not None and expected is not None
        # The whole batches before the stop: those starting below it.
        ends = [*bases[1:], 1 << 62]
        kept = [b for b, after in zip(bases, ends, strict=True) if b < stop and after > offset]
        if not kept:
            assert got.data == b"" and got.next_offset == offset
            return
        assert got.next_offset == stop
        whole = region_bytes(got.data)
        assert bytes(expected.data).startswith(whole)
        assert len(whole) < len(expected.data) or stop == end_offset
    finally:
        segment.close()


def test_a_region_is_sent_with_sendfile_and_survives_the_segment_s_deletion(
        tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(4096))
    fill(segment, [(10, 1000)] * 20)
    fetched = segment.fetch_region(0, 1 << 20, None, True, None, 0)
    assert isinstance(fetched.data, FileRegion)
    expected = segment.fetch(0, 1 << 20, None, True).data  # type: ignore[union-attr]
    segment.close()
    os.unlink(tmp_path / "00000000000000000000.log")  # as retention deletes it
    region = fetched.data
    left, right = socket.socketpair()
    try:
        left.setblocking(False)
        received = bytearray()
        sent = 0
        while sent < len(region):
            sent += region.send(left.fileno(), sent)
            while True:
                try:
                    received += right.recv(1 << 20, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
        while len(received) < len(region):
            received += right.recv(1 << 20)
        assert bytes(received) == expected
    finally:
        region.close()
        left.close()
        right.close()


def test_a_region_of_a_truncated_file_is_never_sent(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(4096))
    bases = fill(segment, [(5, 500)] * 10)
    fetched = segment.fetch_region(0, 1 << 20, None, True, None, 0)
    region = fetched.data
    assert isinstance(region, FileRegion)
    segment.truncate_to(bases[5])
    fill(segment, [(5, 700)] * 5, base_offset=bases[5])  # other batches at the same positions
    left, right = socket.socketpair()
    try:
        with pytest.raises(RegionTruncatedError, match="truncated"):
            region.send(left.fileno(), 0)
        with pytest.raises(RegionTruncatedError, match="truncated"):
            region.read()
        right.setblocking(False)
        with pytest.raises(BlockingIOError):
            right.recv(1)  # not one byte went out
    finally:
        region.close()
        left.close()
        right.close()
        segment.close()


def test_regions_give_their_descriptors_back(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(4096))
    fill(segment, [(3, 100)] * 5)
    before = len(os.listdir("/proc/self/fd"))
    regions = [segment.fetch_region(random.randrange(15), 1 << 20, None, True, None, 0).data
               for _ in range(50)]
    assert len(os.listdir("/proc/self/fd")) == before + 50
    for region in regions:
        region.close()  # type: ignore[union-attr]
        region.close()  # type: ignore[union-attr] (idempotent)
    dropped = segment.fetch_region(0, 1 << 20, None, True, None, 0)
    del dropped  # unclosed: the garbage collector's close gives it back
    assert len(os.listdir("/proc/self/fd")) == before
    segment.close()


def test_out_of_descriptors_a_read_returns_the_bytes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from stratalog.server.storage import file_region

    def no_descriptor_left(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    segment = Segment.create(tmp_path, 0, config(4096))
    fill(segment, [(10, 1000)] * 10)
    expected = segment.fetch(0, 1 << 20, None, True)
    monkeypatch.setattr(file_region.os, "dup", no_descriptor_left)
    got = segment.fetch_region(0, 1 << 20, None, True, None, 0)
    assert got is not None and expected is not None
    assert not isinstance(got.data, FileRegion)
    assert bytes(got.data) == bytes(expected.data)
    segment.close()
