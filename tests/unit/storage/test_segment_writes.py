"""Gathered appends: a segment stores a sequence of buffers back to back, as one append."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stratalog.records import build_batch, iter_batches
from stratalog.server.storage import space
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import StorageIOError
from stratalog.server.storage.log_file import LogFile
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.validation import validate_and_assign_offsets

_IOV_MAX = 1024  # Linux's: the most buffers one pwritev takes


def _log_file_holding(path: Path, data: bytes) -> LogFile:
    path.write_bytes(data)
    return LogFile.open(str(path))


def test_append_writes_every_piece_in_order_past_iov_max(tmp_path: Path) -> None:
    pieces = [bytes([i % 251]) * (i % 7) for i in range(2 * _IOV_MAX + 5)]  # empty ones too
    expected = b"".join(pieces)
    log_file = _log_file_holding(tmp_path / "f", b"keep")
    try:
        assert log_file.append(pieces, len(expected)) == 4
        assert log_file.size_bytes == 4 + len(expected)
        assert log_file.read(len(expected) + 10, 0) == b"keep" + expected
    finally:
        log_file.close()


def test_validated_pieces_are_the_stamped_append(tmp_path: Path) -> None:
    # Pieces (stamped headers + views of the request) join to what a whole copy would hold,
    # and the log stores exactly that.
    batches = b"".join(
        build_batch([(1_700_000_000_000 + i, None, b"v%d" % i, ()) for i in range(n)])
        for n in (1, 5, 30)
    )
    config = LogConfig()
    validated = validate_and_assign_offsets(
        batches, config, first_offset=100, now_ms=1_700_000_000_000, partition_leader_epoch=7
    )
    assert len(validated.pieces) == 6  # header + rest, per batch
    assert sum(len(p) for p in validated.pieces) == validated.size_bytes == len(batches)
    stored = validated.records
    assert [(h.base_offset, h.partition_leader_epoch, h.records_count)
            for h, _ in iter_batches(stored)] == [(100, 7, 1), (101, 7, 5), (106, 7, 30)]
    with PartitionLog.open(tmp_path / "t-0", config) as log:
        log.append(batches)
        log.append(batches)
        data = log.read(0, 1 << 20)
    assert [h.base_offset for h, _ in iter_batches(data)] == [0, 1, 6, 36, 37, 42]
    assert [r.value for _, records in iter_batches(data) for r in records][:6] == [
        b"v0", b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_validation_parses_each_batch_header_once(monkeypatch) -> None:
    # The append path of every produce: the framing walk (records/batch_walk.py) parses a
    # header, and the CRC check and the record walk reuse it (they parsed it again each, three
    # parses a batch).
    from stratalog.records import batch_walk, reader

    parsed: list[int] = []
    real_unpack = batch_walk._unpack_header
    real_parse = reader.parse_header

    def counting_unpack(buf, position=0):
        parsed.append(position)
        return real_unpack(buf, position)

    def counting_parse(buf, position=0):
        parsed.append(position)
        return real_parse(buf, position)

    # (The walk unpacks a header's fields once and yields them as the header: _unpack_header.)
    monkeypatch.setattr(batch_walk, "_unpack_header", counting_unpack)
    monkeypatch.setattr(reader, "parse_header", counting_parse)
    batches = b"".join(build_batch([(1_700_000_000_000 + i, None, b"v", ())] * (i + 1))
                       for i in range(3))
    validated = validate_and_assign_offsets(
        batches, LogConfig(), first_offset=0, now_ms=1_700_000_000_000, partition_leader_epoch=0
    )
    assert validated.batch_count == 3
    assert len(parsed) == 3 and len(set(parsed)) == 3


def test_append_goes_on_after_short_writes_and_refuses_a_zero_write(
    tmp_path: Path, monkeypatch
) -> None:
    # A kernel may write less than asked: each call here writes at most 5 bytes, so every
    # piece is cut somewhere and the rest must follow at the right position.
    real_pwrite = os.pwrite

    def short_pwrite(fd, data, position):
        return real_pwrite(fd, bytes(data)[:5], position)

    def short_pwritev(fd, buffers, position):
        return real_pwrite(fd, b"".join(bytes(b) for b in buffers)[:5], position)

    monkeypatch.setattr(os, "pwrite", short_pwrite)
    monkeypatch.setattr(os, "pwritev", short_pwritev)
    pieces = [b"header-1", b"", b"body of one", b"x", b"header-2", b"last body"]
    log_file = _log_file_holding(tmp_path / "f", b"abc")
    try:
        joined = b"".join(pieces)
        assert log_file.append(pieces, len(joined)) == 3
        assert log_file.size_bytes == 3 + len(joined)
        assert log_file.read(100, 3) == joined
        monkeypatch.setattr(os, "pwritev", lambda fd, buffers, position: 0)
        with pytest.raises(StorageIOError, match="write returned 0"):
            log_file.append([b"a", b"b"], 2)
        # All or nothing: the file is cut back and the size did not move.
        assert log_file.size_bytes == 3 + len(joined) == log_file.file_size()
    finally:
        log_file.close()


# ------------------------------------------------------------------ blocks allocated first


def _allocated_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def _large_batch() -> bytes:
    return build_batch(
        [(1_700_000_000_000 + i, None, bytes([i % 256]) * 100, ()) for i in range(3000)]
    )


def test_allocate_reserves_blocks_and_keeps_the_size(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"data", 0)
        if not space.allocate(fd, 4, 1 << 20):
            pytest.skip("this file system cannot allocate without changing the size")
        assert os.fstat(fd).st_size == 4
        assert _allocated_bytes(path) >= 1 << 20
        os.ftruncate(fd, 4)  # a cut to its own length frees them
        assert _allocated_bytes(path) <= 64 * 1024
    finally:
        os.close(fd)


def test_a_large_append_leaves_no_block_past_its_data(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", {})
    batch = _large_batch()
    assert len(batch) >= space.ALLOCATE_MIN_BYTES
    for _ in range(3):
        log.append(batch)
    path = log.active_segment.log_path
    assert os.stat(path).st_size == 3 * len(batch)
    assert _allocated_bytes(path) <= 3 * len(batch) + 64 * 1024
    assert [h.records_count for h, _ in iter_batches(path.read_bytes())] == [3000] * 3
    log.close()


def test_recovery_frees_blocks_a_crash_left_past_the_end(tmp_path: Path) -> None:
    # A crash between the allocation and the write leaves blocks past the end of the .log:
    # invisible to reads, freed when recovery cuts the file to its valid length.
    log = PartitionLog.open(tmp_path / "t-0", {})
    log.append(_large_batch())
    segment = log.active_segment
    size = os.stat(segment.log_path).st_size
    fd = os.open(segment.log_path, os.O_RDWR)
    try:
        if not space.allocate(fd, size, 8 << 20):
            pytest.skip("this file system cannot allocate without changing the size")
    finally:
        os.close(fd)
    assert _allocated_bytes(segment.log_path) >= 8 << 20
    assert segment.recover() == 0
    assert os.stat(segment.log_path).st_size == size
    assert _allocated_bytes(segment.log_path) <= size + 64 * 1024
    log.close()


def test_preallocated_segments_are_not_allocated_again(tmp_path: Path, monkeypatch) -> None:
    calls: list[tuple[int, int]] = []
    def allocate(fd: int, offset: int, length: int) -> bool:
        calls.append((offset, length))
        return True

    monkeypatch.setattr(space, "allocate", allocate)
    log = PartitionLog.open(
        tmp_path / "p-0", {"preallocate": "true", "segment.bytes": str(4 << 20)}
    )
    log.append(_large_batch())
    assert calls == []
    plain = PartitionLog.open(tmp_path / "q-0", {})
    plain.append(_large_batch())
    plain.append(build_batch([(1_700_000_000_000, None, b"small", ())]))
    assert len(calls) == 1  # the large append only
    log.close()
    plain.close()
