"""Bad bytes: every prefix, every single-byte corruption and random garbage end in a RecordError.

Never an IndexError, struct.error, a library exception or a hang. Prefix feeds are exhaustive
(every cut of each batch); corruption sweeps cover every byte position of small batches of each
codec with several XOR masks, with and without CRC checking.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records import (
    Compression,
    CorruptRecordError,
    RecordError,
    build_batch,
    decode_batch,
    iter_batches,
    summarize_records,
)
from stratalog.records.batch import rewrite_crc

RECORDS = [
    (1700000000000, None, b"hello", ()),
    (1700000000005, b"k", b"there" * 20, (("h1", b"v"), ("h2", None))),
    (1699999999000, b"key-3", None, ()),
]
BATCHES = {codec: build_batch(RECORDS, compression=codec) for codec in Compression}


def _readers(buf: bytes, verify_crc: bool = True):
    yield lambda: decode_batch(buf, verify_crc=verify_crc)
    yield lambda: summarize_records(buf, verify_crc=verify_crc, require_contiguous_offsets=False)
    yield lambda: list(iter_batches(buf, verify_crc=verify_crc))


@pytest.mark.parametrize("codec", list(Compression))
def test_every_prefix_is_corrupt(codec):
    batch = BATCHES[codec]
    assert list(iter_batches(b"")) == []  # zero batches; every other prefix is broken
    for cut in range(1, len(batch)):
        for read in _readers(batch[:cut]):
            with pytest.raises(CorruptRecordError):
                read()


@pytest.mark.parametrize("codec", list(Compression))
def test_every_prefix_with_a_fixed_length_and_crc_is_corrupt(codec):
    # Truncate the records region but repair length and CRC, so only the record structure (or
    # the compressed stream) can reveal the damage.
    batch = BATCHES[codec]
    for cut in range(61, len(batch)):
        damaged = bytearray(batch[:cut])
        damaged[8:12] = (cut - 12).to_bytes(4, "big")
        rewrite_crc(damaged, 0, cut)
        for read in _readers(bytes(damaged)):
            with pytest.raises(CorruptRecordError):
                read()


@pytest.mark.parametrize("codec", list(Compression))
def test_single_byte_corruption_is_caught_by_the_crc(codec):
    batch = BATCHES[codec]
    for position in range(len(batch)):
        if position < 21 and position not in range(16, 21):
            continue  # base offset, length, leader epoch: outside the CRC by design
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(batch)
            damaged[position] ^= mask
            for read in _readers(bytes(damaged)):
                with pytest.raises(RecordError):
                    read()


@pytest.mark.parametrize("codec", list(Compression))
def test_single_byte_corruption_without_crc_never_escapes_the_error_tree(codec):
    batch = BATCHES[codec]
    outcomes = {"error": 0, "decoded": 0}
    for position in range(len(batch)):
        for mask in (0x01, 0x40, 0x80, 0xFF):
            damaged = bytearray(batch)
            damaged[position] ^= mask
            for read in _readers(bytes(damaged), verify_crc=False):
                try:
                    read()
                    outcomes["decoded"] += 1
                except RecordError:
                    outcomes["error"] += 1
    # Some flips are harmless (inside a value), many are not: both must have happened.
    assert outcomes["error"] > 0 and outcomes["decoded"] > 0


@settings(max_examples=300, deadline=None)
@given(
    garbage=st.binary(min_size=0, max_size=200),
    codec=st.sampled_from(list(Compression)),
    count=st.integers(-3, 2**31 - 1) | st.integers(0, 5),
)
def test_random_records_region_raises_only_record_errors(garbage, codec, count):
    template = bytearray(BATCHES[codec][:61])
    batch = template + garbage
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[57:61] = count.to_bytes(4, "big", signed=True)
    rewrite_crc(batch, 0, len(batch))
    for read in _readers(bytes(batch)):
        with contextlib.suppress(RecordError):
            read()


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(min_size=0, max_size=300))
def test_random_buffers_raise_only_record_errors(garbage):
    for read in _readers(garbage, verify_crc=False):
        with contextlib.suppress(RecordError):
            read()
    with contextlib.suppress(RecordError):
        list(iter_batches(garbage, allow_partial_tail=True))


def test_huge_declared_records_count_fails_fast():
    batch = bytearray(BATCHES[Compression.NONE])
    batch[57:61] = (2**31 - 1).to_bytes(4, "big")
    rewrite_crc(batch, 0, len(batch))
    with pytest.raises(CorruptRecordError, match="declares 2147483647 records"):
        decode_batch(batch)
