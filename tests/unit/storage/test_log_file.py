"""LogFile: the one walker of a ``.log`` against a plain model, the framing rules in every mode,
partial tails, a file shrinking under a walk, recovery's checks, the block reader's refills."""

from __future__ import annotations

import logging
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratalog.records.batch import iter_batch_headers
from stratalog.records.builder import build_batch
from stratalog.records.errors import CorruptRecordError, InvalidRecordError
from stratalog.server.storage.errors import LogClosedError, StorageIOError
from stratalog.server.storage.log_file import (
    ANY_OFFSET,
    ANY_TIMESTAMP,
    LENIENT,
    MAX_BLOCK_BYTES,
    RECOVERY_BLOCK_BYTES,
    LogFile,
    summarize,
)

T0 = 1_700_000_000_000


class Batch(NamedTuple):
    """The model of one batch: where it is and what a walk reads of it."""

    position: int
    size: int
    last_offset: int
    records_count: int
    max_timestamp: int


def make_log(specs: list[tuple[int, list[int], int]]) -> tuple[bytes, list[Batch]]:
    """Batches back to back from (base offset, timestamps, value bytes); and the model."""
    data = bytearray()
    model = []
    for base_offset, timestamps, value_bytes in specs:
        batch = build_batch(
            [(ts, None, b"v" * value_bytes, ()) for ts in timestamps], base_offset=base_offset
        )
        model.append(
            Batch(len(data), len(batch), base_offset + len(timestamps) - 1, len(timestamps),
                  max(timestamps))
        )
        data += batch
    return bytes(data), model


def open_log(directory: Path, data: bytes) -> LogFile:
    path = directory / "00000000000000000000.log"
    path.write_bytes(data)
    return LogFile.open(str(path))


def simple_log(count: int = 5, value_bytes: int = 10) -> tuple[bytes, list[Batch]]:
    return make_log([(2 * i, [T0 + 2 * i, T0 + 2 * i + 1], value_bytes) for i in range(count)])


def as_model(found: tuple | None) -> Batch | None:
    return None if found is None else Batch(*found[:5])


# ---------------------------------------------------------------- the walker against a model


@st.composite
def random_logs(draw: st.DrawFn) -> list[tuple[int, list[int], int]]:
    specs = []
    offset = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 25))):
        count = draw(st.integers(1, 4))
        timestamps = draw(st.lists(st.integers(T0 - 5, T0 + 60), min_size=count, max_size=count))
        # Mostly small; sometimes a batch larger than a walk's first block or its largest.
        value_bytes = draw(st.sampled_from([1, 30, 500, 5000, MAX_BLOCK_BYTES + 10]))
        specs.append((offset, timestamps, value_bytes))
        offset += count + draw(st.sampled_from([0, 0, 0, 3]))  # gaps, as compaction leaves
    return specs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=random_logs(),
    # Tails that end a walk quietly: 17 bytes or fewer, or the start of a batch not all there.
    tail=st.sampled_from([b"", b"\x00" * 9, build_batch([(T0, None, b"t" * 30, ())])[:40]]),
    queries=st.lists(
        st.tuples(
            st.integers(0, 30), st.integers(-2, 120), st.integers(T0 - 6, T0 + 61),
            st.integers(0, 30), st.sampled_from([61, 100, 4096])
        ),
        min_size=1, max_size=10,
    ),
)
def test_every_stop_condition_agrees_with_a_plain_model(
    specs: list[tuple[int, list[int], int]],
    tail: bytes,
    queries: list[tuple[int, int, int, int, int]],
) -> None:
    data, model = make_log(specs)
    data += tail  # a partial tail ends every walk quietly
    with tempfile.TemporaryDirectory() as directory:
        log_file = open_log(Path(directory), data)
        size = len(data)
        try:
            for start_index, offset, timestamp, end_index, read_bytes in queries:
                starts = [b.position for b in model] + [size - len(tail)]
                start = starts[min(start_index, len(starts) - 1)]
                # The end: a batch boundary, or inside a batch (a partial batch there).
                ends = [b.position + b.size for b in model] + [size, size - 1, start]
                end = max(start, ends[min(end_index, len(ends) - 1)] - end_index % 2 * 7)
                whole = [b for b in model if b.position >= start and b.position + b.size <= end]
                # "the first batch with last offset >= o and max timestamp >= t"
                expected = next(
                    (b for b in whole if b.last_offset >= offset and b.max_timestamp >= timestamp),
                    None,
                )
                found = log_file.walk(start, end, offset, timestamp, read_bytes=read_bytes)
                assert as_model(found) == expected
                if found is not None:  # the block holds the batch's header
                    position, _, _, _, _, block, block_start = found
                    assert block[position - block_start : position - block_start + 61] == (
                        data[position : position + 61]
                    )
                # "the first batch", "every batch", "the last batch"
                assert as_model(log_file.walk(start, end)) == (whole[0] if whole else None)
                assert [Batch(*b[:5]) for b in log_file.batches(start, end)] == whole
                assert as_model(log_file.last_batch(start, end)) == (whole[-1] if whole else None)
                assert list(log_file.headers(start, end)) == list(
                    iter_batch_headers(data, start, end)
                )
        finally:
            log_file.close()


def test_a_walk_may_start_from_a_block_already_read(tmp_path: Path) -> None:
    data, model = simple_log(6)
    log_file = open_log(tmp_path, data)
    block = data[model[2].position : model[4].position]  # two batches and no more
    found = log_file.walk(model[2].position, len(data), 9, block=block,
                          block_start=model[2].position)
    assert as_model(found) == model[4]  # read on past the block
    found = log_file.walk(model[2].position, len(data), 5, block=block,
                          block_start=model[2].position)
    assert found is not None and found[5] is block  # in the block: no read
    log_file.close()


def test_collecting_walks_a_block_and_says_where_to_go_on(tmp_path: Path) -> None:
    data, model = simple_log(5)
    log_file = open_log(tmp_path, data)
    scanned: list = []
    block = data[: model[3].position + 20]  # three whole batches and a bit of the fourth
    next_position, walked, block_start = log_file.walk(  # type: ignore[misc]
        0, len(data), block=block, into=scanned
    )
    assert (next_position, walked, block_start) == (model[3].position, block, 0)
    assert [(f[0] + f[4], f[1] + 12) for f in scanned] == [(b.last_offset, b.size)
                                                           for b in model[:3]]
    assert summarize(scanned) == (model[3].position, model[2].last_offset + 1, 6)
    rest: list = []
    over, _, _ = log_file.walk(next_position, len(data), into=rest)  # type: ignore[misc]
    assert over is None and len(rest) == 2
    log_file.close()


# ---------------------------------------------------------------- framing rules


def malformed(kind: str) -> bytes:
    """A second batch, malformed as ``kind``, after a good first one."""
    good = build_batch([(T0, None, b"x" * 100, ())], base_offset=1)
    if kind == "size field below 14":
        return struct.pack(">qi", 1, 13) + good[12:]
    if kind == "magic 1":
        return good[:16] + b"\x01" + good[17:]
    if kind == "magic -1":
        return good[:16] + b"\xff" + good[17:]
    if kind == "below the 61-byte header":
        return struct.pack(">qiib", 1, 30, 0, 2) + b"\x00" * 29  # 42 bytes
    raise AssertionError(kind)


MALFORMED = {
    "size field below 14": (CorruptRecordError, "found record size 13 at position {p}"),
    "magic 1": (InvalidRecordError, "record batch at position {p}{s} has magic 1"),
    "magic -1": (InvalidRecordError, "record batch at position {p}{s} has magic -1"),
    "below the 61-byte header": (
        CorruptRecordError, "record batch at position {p}{s} declares 42 bytes, less than"
    ),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
@pytest.mark.parametrize("trailer", [b"", b"\x00" * 5000], ids=["at the end", "in a block"])
def test_each_framing_rule_gives_the_same_error_in_every_mode_that_raises(
    tmp_path: Path, kind: str, trailer: bytes
) -> None:
    first = build_batch([(T0, None, b"a", ())], base_offset=0)
    data = first + malformed(kind) + trailer
    log_file = open_log(tmp_path, data)
    path = str(tmp_path / "00000000000000000000.log")
    error, message = MALFORMED[kind]
    expected = message.format(p=len(first), s=f" of {path}")
    # The buffer walker of records.batch: the same rule, the message without the file.
    with pytest.raises(error) as buffer_error:
        list(iter_batch_headers(data))
    assert str(buffer_error.value).startswith(message.format(p=len(first), s=""))
    # Every strict walk of the file: a find past the first batch, every batch, the last one,
    # with the block read whole, header first, or block by block.
    walks = [
        lambda: log_file.walk(0, len(data), 1),
        lambda: log_file.walk(0, len(data), 1, read_bytes=61),
        lambda: log_file.walk(len(first), len(data)),
        lambda: log_file.walk(0, len(data), 1, block=data[:70], block_start=0),
        lambda: list(log_file.batches(0, len(data))),
        lambda: log_file.last_batch(0, len(data)),
    ]
    for walk in walks:
        with pytest.raises(error) as file_error:
            walk()
        assert str(file_error.value).startswith(expected)
        assert str(file_error.value).replace(f" of {path}", "") == str(buffer_error.value)
    # A walk that stops before it does not raise.
    assert as_model(log_file.walk(0, len(data))) == Batch(0, len(first), 0, 1, T0)
    # Lenient (the rest of a fetch): the walk ends before it, quietly.
    scanned: list = []
    over, _, _ = log_file.walk(  # type: ignore[misc]
        0, len(data), block=data, into=scanned, mode=LENIENT
    )
    assert over is None and len(scanned) == 1
    log_file.close()


def test_a_size_field_below_14_is_checked_before_the_end(tmp_path: Path) -> None:
    # Kafka checks the size field first: a batch "running past the end" with a size field of
    # 13 cannot be; a size field of 14 or more that runs past the end is a partial tail.
    first = build_batch([(T0, None, b"a", ())], base_offset=0)
    log_file = open_log(tmp_path, first + struct.pack(">qi", 1, 13) + b"\x00" * 10)
    with pytest.raises(CorruptRecordError, match="record size 13"):
        log_file.walk(0, log_file.size_bytes, 1)
    log_file.close()


# ---------------------------------------------------------------- partial tails, shrinking


@pytest.mark.parametrize("cut", [1, 17, 18, 40, 60, 61, 62, -1])
def test_a_partial_tail_ends_every_walk_quietly(tmp_path: Path, cut: int) -> None:
    data, model = simple_log(3)
    extra = build_batch([(T0, None, b"z" * 50, ())], base_offset=6)
    log_file = open_log(tmp_path, data + extra[:cut])
    end = log_file.size_bytes
    assert log_file.walk(0, end, 6) is None
    assert [Batch(*b[:5]) for b in log_file.batches(0, end)] == model
    assert as_model(log_file.last_batch(0, end)) == model[-1]
    scanned: list = []
    over, _, _ = log_file.walk(0, end, block=log_file.read(end, 0), into=scanned, mode=LENIENT)  # type: ignore[misc]
    assert over is None and len(scanned) == 3
    log_file.close()


@pytest.mark.parametrize("keep", [0, 10, 17, 30, 61, 100, -1])
@pytest.mark.parametrize("read_bytes", [61, 4096])
def test_a_file_that_shrinks_under_a_walk_ends_it_quietly(
    tmp_path: Path, keep: int, read_bytes: int
) -> None:
    # A truncation by the writer while a reader walks up to the size it saw: the reads come
    # back short, and the walk ends where the data does, with the whole batches before it.
    data, model = simple_log(40, value_bytes=200)
    log_file = open_log(tmp_path, data)
    published = log_file.size_bytes
    cut_batch = model[20]
    cut = cut_batch.position + (keep if keep >= 0 else cut_batch.size - 1)
    os.truncate(tmp_path / "00000000000000000000.log", cut)
    whole = [b for b in model if b.position + b.size <= cut]
    assert log_file.walk(0, published, model[-1].last_offset, read_bytes=read_bytes) is None
    assert [Batch(*b[:5]) for b in log_file.batches(0, published)] == whole
    assert as_model(log_file.last_batch(0, published)) == whole[-1]
    log_file.close()


def test_a_file_shrinking_between_the_walk_and_its_refill(tmp_path: Path) -> None:
    data, model = simple_log(200, value_bytes=100)
    log_file = open_log(tmp_path, data)
    end = log_file.size_bytes
    walk = log_file.batches(0, end)
    first = [next(walk) for _ in range(3)]  # the first block is read
    os.truncate(tmp_path / "00000000000000000000.log", model[150].position + 5)
    rest = list(walk)
    assert [Batch(*b[:5]) for b in first + rest] == model[:150]
    log_file.close()


# ---------------------------------------------------------------- recovery mode


def recovered(log_file: LogFile, max_message_bytes: int | None = None) -> list[Batch]:
    """The valid batches as the recovery walk gives them, positions from the sizes."""
    batches = []
    position = 0
    for block in log_file.valid_batches(log_file.file_size(), max_message_bytes):
        for base_offset, length, _, _, last_offset_delta, max_timestamp, count in block:
            size = length + 12
            batches.append(Batch(position, size, base_offset + last_offset_delta, count,
                                 max_timestamp))
            position += size
    return batches


def test_recovery_walks_every_batch_across_blocks(tmp_path: Path) -> None:
    # Batches small, larger than a read block, and larger than a recovery block (checksummed
    # in pieces, never read whole).
    data, model = make_log(
        [(0, [T0], 10), (1, [T0 + 1], 300_000), (2, [T0 + 2], 10),
         (3, [T0 + 3], RECOVERY_BLOCK_BYTES + 5000), (4, [T0 + 4], 10)]
        + [(5 + i, [T0 + 5 + i], 900) for i in range(2000)]
    )
    log_file = open_log(tmp_path, data)
    assert recovered(log_file) == model
    log_file.close()


@pytest.mark.parametrize("damaged_batch", [1, 3, 500])
def test_recovery_stops_at_a_crc_failure_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damaged_batch: int
) -> None:
    data, model = make_log(
        [(0, [T0], 10), (1, [T0 + 1], 300_000), (2, [T0 + 2], 10),
         (3, [T0 + 3], RECOVERY_BLOCK_BYTES + 5000)]
        + [(4 + i, [T0 + 4 + i], 900) for i in range(1000)]
    )
    damaged = bytearray(data)
    batch = model[damaged_batch]
    damaged[batch.position + batch.size - 1] ^= 0xFF  # the last byte: covered by the CRC
    log_file = open_log(tmp_path, bytes(damaged))
    with caplog.at_level(logging.WARNING, logger="stratalog.server.storage.log_file"):
        assert recovered(log_file) == model[:damaged_batch]
    assert f"position {batch.position}" in caplog.text and "failing its CRC" in caplog.text
    log_file.close()


def test_recovery_stops_at_a_batch_above_max_message_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, model = make_log([(0, [T0], 10), (1, [T0], 500), (2, [T0], 10)])
    log_file = open_log(tmp_path, data)
    with caplog.at_level(logging.WARNING, logger="stratalog.server.storage.log_file"):
        assert recovered(log_file, max_message_bytes=model[0].size) == model[:1]
    assert "max.message.bytes" in caplog.text
    assert recovered(log_file) == model
    log_file.close()


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_recovery_stops_at_a_malformed_header_with_the_rule_as_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    first = build_batch([(T0, None, b"a", ())], base_offset=0)
    log_file = open_log(tmp_path, first + malformed(kind) + b"\x00" * 100)
    path = str(tmp_path / "00000000000000000000.log")
    with caplog.at_level(logging.WARNING, logger="stratalog.server.storage.log_file"):
        assert recovered(log_file) == [Batch(0, len(first), 0, 1, T0)]
    _, message = MALFORMED[kind]
    assert message.format(p=len(first), s=f" of {path}") in caplog.text
    log_file.close()


def test_recovery_warns_of_a_partial_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, model = simple_log(3)
    log_file = open_log(tmp_path, data + build_batch([(T0, None, b"x", ())])[:-1])
    with caplog.at_level(logging.WARNING, logger="stratalog.server.storage.log_file"):
        assert recovered(log_file) == model
    assert f"partial batch at position {len(data)}" in caplog.text
    log_file.close()


def legacy_message(magic: int) -> bytes:
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", T0) if magic else b"")
    body += struct.pack(">ii", -1, 1) + b"x"
    return struct.pack(">qiI", 6, 4 + len(body), zlib.crc32(body)) + body


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("trailer", [b"", b"\x00" * 200], ids=["at the end", "in a block"])
def test_recovery_raises_for_an_intact_legacy_message_and_cuts_a_broken_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, magic: int, trailer: bytes
) -> None:
    data, model = simple_log(3)
    legacy = legacy_message(magic)
    (tmp_path / "good").mkdir()
    log_file = open_log(tmp_path / "good", data + legacy + trailer)
    with pytest.raises(InvalidRecordError, match=f"legacy format v{magic} at position {len(data)}"):
        recovered(log_file)
    log_file.close()
    (tmp_path / "bad").mkdir()
    log_file = open_log(tmp_path / "bad", data + legacy[:-1] + b"y" + trailer)
    with caplog.at_level(logging.WARNING, logger="stratalog.server.storage.log_file"):
        assert recovered(log_file) == model
    assert f"has magic {magic}" in caplog.text
    log_file.close()


# ---------------------------------------------------------------- the block reader


@pytest.mark.parametrize("value_bytes", [10, 3000, 20_000, MAX_BLOCK_BYTES + 1])
def test_reads_across_block_boundaries_and_batches_larger_than_a_block(
    tmp_path: Path, value_bytes: int
) -> None:
    data, model = make_log([(i, [T0 + i], value_bytes) for i in range(12)])
    log_file = open_log(tmp_path, data)
    for read_bytes in (61, 4096):
        for batch in model:
            for start in {0, model[max(0, batch.last_offset - 3)].position}:
                found = log_file.walk(start, len(data), batch.last_offset, read_bytes=read_bytes)
                assert as_model(found) == batch
                _, _, _, _, _, block, block_start = found  # type: ignore[misc]
                relative = batch.position - block_start
                assert block[relative : relative + 61] == data[batch.position:][:61]
    log_file.close()


def test_a_refill_takes_the_size_of_the_batch_stepped_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of one producer are alike: after stepping over one, the refill is its size, so
    # the next batch comes whole with its header (one read), not 4 KiB at a time.
    data, model = make_log([(i, [T0 + i], 10_000) for i in range(4)])
    log_file = open_log(tmp_path, data)
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def recording_pread(fd: int, size: int, position: int) -> bytes:
        reads.append((size, position))
        return real_pread(fd, size, position)

    monkeypatch.setattr(os, "pread", recording_pread)
    found = log_file.walk(0, len(data), model[1].last_offset, read_bytes=61)
    assert as_model(found) == model[1]
    assert reads == [(61, 0), (model[0].size, model[1].position)]
    assert found[5] == data[model[1].position : model[2].position]  # type: ignore[index]
    log_file.close()


# ---------------------------------------------------------------- the file


def test_append_publishes_after_writing_and_truncation_before_cutting(tmp_path: Path) -> None:
    log_file = LogFile.open(str(tmp_path / "00000000000000000000.log"), create=True)
    data, model = simple_log(3)
    assert log_file.append([data[:50], memoryview(data)[50:]], len(data)) == 0
    assert log_file.size_bytes == len(data) == log_file.file_size()
    assert log_file.truncate_to(model[1].position) == len(data) - model[1].position
    assert log_file.size_bytes == model[1].position == log_file.file_size()
    with pytest.raises(ValueError, match="cannot truncate"):
        log_file.truncate_to(model[1].position + 1)
    log_file.close()


def test_preallocated_file_is_trimmed_and_cut_at_frees_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    log_file = LogFile.open(str(path), create=True, preallocate_bytes=1 << 20)
    assert log_file.size_bytes == 0 and path.stat().st_size == 1 << 20
    log_file.append([b"x" * 100], 100)
    log_file.trim()
    assert path.stat().st_size == 100
    log_file.cut_at(40)
    assert log_file.size_bytes == 40 == path.stat().st_size
    log_file.close()


def test_create_refuses_an_existing_file_and_open_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    with pytest.raises(StorageIOError, match=r"failed to open segment file .*\.log"):
        LogFile.open(str(path))
    LogFile.open(str(path), create=True).close()
    with pytest.raises(StorageIOError, match=r"failed to create segment file .*\.log"):
        LogFile.open(str(path), create=True)


def test_read_errors_name_the_file_the_position_and_the_size(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: every pread fails
    log_file = LogFile(str(tmp_path / "x.log"), fd, 1000, allocate_appends=False)
    with pytest.raises(StorageIOError, match=r"failed to read 10 bytes at position 5 of .*x\.log"):
        log_file.read(10, 5)
    with pytest.raises(StorageIOError, match=r"failed to read \d+ bytes at position 0 of .*x\.log"):
        log_file.walk(0, 1000)
    log_file.close_handler()
    with pytest.raises(LogClosedError, match=r"x\.log is closed"):
        log_file.read(10, 5)
    with pytest.raises(LogClosedError):
        log_file.walk(0, 1000)


def test_rename_keeps_the_descriptor_and_delete_closes(tmp_path: Path) -> None:
    data, _ = simple_log(2)
    log_file = open_log(tmp_path, data)
    target = tmp_path / "00000000000000000000.log.deleted"
    log_file.rename_to(target)
    assert log_file.path == target and target.exists()
    assert log_file.read(len(data), 0) == data
    log_file.delete()
    assert log_file.is_closed and not target.exists()
    log_file.delete()  # missing: fine
    log_file.close()  # closed: nothing to do


def test_walk_constants_are_below_every_offset_and_timestamp() -> None:
    assert ANY_OFFSET < -(2**63) and ANY_TIMESTAMP < -(2**63)
