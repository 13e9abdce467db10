"""Codecs: Kafka's framing byte by byte, frames written the way Kafka writes them, limits, errors."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct
import subprocess
import sys
import threading

import cramjam
import pytest
import zstandard
from aiokafka import codec as aiokafka_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records import (
    Compression,
    CorruptRecordError,
    UnsupportedCompressionError,
    build_batch,
    decode_batch,
)
from stratalog.records.batch import rewrite_crc
from stratalog.records.compression import (
    SNAPPY_BLOCK_SIZE_BYTES,
    XERIAL_HEADER,
    compress,
    decompress,
    max_compressed_size,
)
from stratalog.records.errors import DecompressionLimitError

CODECS = [c for c in Compression if c != Compression.NONE]
SAMPLE = b"".join(b"record %d of a test batch; " % i for i in range(4000))  # ~110 KB


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("data", [b"", b"x", SAMPLE, os.urandom(70_000)])
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data), max_bytes=len(data)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_concatenated_streams_read_as_one(codec):
    stream = compress(codec, b"first ") + compress(codec, b"second")
    assert decompress(codec, stream, max_bytes=100) == b"first second"


def test_xerial_snappy_framing():
    stream = compress(Compression.SNAPPY, SAMPLE)
    assert stream[:16] == XERIAL_HEADER == bytes.fromhex("82534e41505059000000000100000001")
    # Walk the blocks by hand: [int32 length][raw snappy block], 32 KiB of input each.
    position, pieces = 16, []
    while position < len(stream):
        (size,) = struct.unpack_from(">i", stream, position)
        pieces.append(
            bytes(cramjam.snappy.decompress_raw(stream[position + 4 : position + 4 + size]))
        )
        position += 4 + size
    assert position == len(stream)
    assert [len(p) for p in pieces[:-1]] == [SNAPPY_BLOCK_SIZE_BYTES] * (len(pieces) - 1)
    assert b"".join(pieces) == SAMPLE
    # aiokafka's independent xerial decoder agrees.
    assert aiokafka_codec.snappy_decode(stream) == SAMPLE


def test_snappy_reads_other_writers():
    # aiokafka's xerial encoder, and a bare raw block as snappy-java also accepts.
    theirs = aiokafka_codec.snappy_encode(SAMPLE)
    assert decompress(Compression.SNAPPY, theirs, max_bytes=10**6) == SAMPLE
    raw = bytes(cramjam.snappy.compress_raw(SAMPLE))
    assert decompress(Compression.SNAPPY, raw, max_bytes=10**6) == SAMPLE
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(Compression.SNAPPY, raw, max_bytes=1000)


def test_lz4_frame_header_is_kafkas():
    stream = compress(Compression.LZ4, SAMPLE)
    # magic, FLG 0x60 (version 01, independent blocks, no checksums, no content size),
    # BD 0x40 (64 KiB max block), header checksum.
    assert stream[:7].hex() == "04224d18604082"
    assert stream[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum


def test_lz4_reads_a_frame_laid_out_as_kafkas_lz4_block_output_stream():
    # Kafka writes a block it cannot compress as-is, flagged by the size's high bit.
    data = os.urandom(1000)
    frame = bytes.fromhex("04224d18604082") + struct.pack("<I", 0x80000000 | len(data)) + data
    frame += b"\x00\x00\x00\x00"
    assert decompress(Compression.LZ4, frame, max_bytes=1000) == data
    # aiokafka's writer (cramjam, its own block size choice) is read too.
    assert decompress(Compression.LZ4, aiokafka_codec.lz4_encode(SAMPLE), max_bytes=10**6) == (
        SAMPLE
    )


def test_zstd_frames_without_and_with_content_size():
    stream = compress(Compression.ZSTD, SAMPLE)
    assert zstandard.get_frame_parameters(stream).content_size == zstandard.CONTENTSIZE_UNKNOWN
    with_size = zstandard.ZstdCompressor(write_content_size=True).compress(SAMPLE)
    assert decompress(Compression.ZSTD, with_size, max_bytes=len(SAMPLE)) == SAMPLE


def test_gzip_is_a_standard_gzip_stream():
    stream = compress(Compression.GZIP, SAMPLE)
    assert stream[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(stream) == SAMPLE
    assert decompress(Compression.GZIP, gzip.compress(SAMPLE), max_bytes=len(SAMPLE)) == SAMPLE


@pytest.mark.parametrize("codec", list(Compression))
def test_decompression_bomb_is_stopped(codec):
    bomb = compress(codec, bytes(5_000_000))
    with pytest.raises(DecompressionLimitError, match=r"more than 4999999 bytes"):
        decompress(codec, bomb, max_bytes=4_999_999)
    with pytest.raises(CorruptRecordError, match=r"more than 0 bytes"):
        decompress(codec, bomb, max_bytes=0)


# Run in a fresh interpreter: a process's peak RSS only grows, so the measure needs one that did
# nothing large before. The bomb is 63 MiB of zeros (issue 13's probe), compressed by streaming
# 1 MiB at a time, so that making it allocates little either.
_BOMB_CHILD = """
import resource, struct, sys, zlib
import cramjam, lz4.frame, zstandard
from stratalog.records.batch import Compression
from stratalog.records.compression import XERIAL_HEADER, decompress
from stratalog.records.errors import DecompressionLimitError

codec = Compression[sys.argv[1]]
chunk, chunks = bytes(1 << 20), 63
if codec == Compression.GZIP:
    writer = zlib.compressobj(6, zlib.DEFLATED, 31)
    bomb = b"".join([writer.compress(chunk) for _ in range(chunks)] + [writer.flush()])
elif codec == Compression.ZSTD:
    writer = zstandard.ZstdCompressor().compressobj()
    bomb = b"".join([writer.compress(chunk) for _ in range(chunks)] + [writer.flush()])
elif codec == Compression.LZ4:
    writer = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    bomb = b"".join([writer.begin()] + [writer.compress(chunk) for _ in range(chunks)]
                    + [writer.flush()])
else:
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    bomb = XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (chunks * 32)
before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decompress(codec, bomb, max_bytes=1 << 20)
except DecompressionLimitError:
    pass
else:
    raise SystemExit("not stopped")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib)
"""


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_is_stopped_before_it_allocates_much_past_the_limit(codec):
    # Decompression is incremental for every codec: with a 1 MiB limit, a 63 MiB bomb costs a
    # few MiB of memory (a codec block and the output so far), never its decompressed size.
    child = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, codec.name],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert child.returncode == 0, child.stderr
    growth_kib = int(child.stdout)
    assert growth_kib < 16 * 1024, f"{codec.name}: peak RSS grew {growth_kib} KiB"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("damage", ["truncate", "trailing", "flip", "garbage", "empty"])
def test_corrupt_streams_name_the_codec(codec, damage):
    stream = bytearray(compress(codec, SAMPLE))
    if damage == "truncate":
        stream = stream[: len(stream) // 2]
    elif damage == "trailing":
        stream += b"junk"
    elif damage == "flip":
        stream[len(stream) // 2] ^= 0xFF
    elif damage == "garbage":
        stream = bytearray(b"\x00\x01\x02" * 50)
    else:
        stream = bytearray()
    try:
        result = decompress(codec, bytes(stream), max_bytes=10**6)
    except CorruptRecordError as exc:
        assert codec.name.lower() in str(exc)
    else:
        # Only a flip inside a stored literal can survive, and then the data must differ.
        assert damage == "flip" and result != SAMPLE


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=5000), codec=st.sampled_from(CODECS))
def test_random_input_raises_only_corrupt_record_error(data, codec):
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, data, max_bytes=100_000)


@settings(max_examples=50, deadline=None)
@given(size=st.integers(0, 300_000), codec=st.sampled_from(list(Compression)))
def test_max_compressed_size_bounds_incompressible_input(size, codec):
    data = os.urandom(size)
    assert len(compress(codec, data)) <= max_compressed_size(codec, size)


def test_unknown_codec_id_in_a_batch_is_unsupported():
    batch = bytearray(build_batch([(0, None, b"v", ())]))
    batch[22] = (batch[22] & ~0x07) | 5
    rewrite_crc(batch, 0, len(batch))
    with pytest.raises(UnsupportedCompressionError, match="codec id 5"):
        decode_batch(batch)


def test_levels_change_output_not_readability():
    fast = compress(Compression.GZIP, SAMPLE, level=1)
    best = compress(Compression.GZIP, SAMPLE, level=9)
    assert fast != best
    for stream in (fast, best, compress(Compression.ZSTD, SAMPLE, level=19)):
        codec = Compression.GZIP if stream in (fast, best) else Compression.ZSTD
        assert decompress(codec, stream, max_bytes=len(SAMPLE)) == SAMPLE


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (XERIAL_HEADER[:10], "truncated inside the xerial header"),
        (b"\x00\x00", "truncated in the block length"),
        (b"\xff\xff\xff\xff", "declares -1 bytes"),
        (b"\x00\x00\x01\x00abc", "declares 256 bytes but 3 remain"),
    ],
)
def test_xerial_framing_errors(tail, message):
    stream = compress(Compression.SNAPPY, b"payload") + tail
    with pytest.raises(CorruptRecordError, match=message):
        decompress(Compression.SNAPPY, stream, max_bytes=1000)


def test_codec_ids_outside_the_enum_are_unsupported():
    with pytest.raises(UnsupportedCompressionError, match="codec id 6"):
        compress(6, b"x")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedCompressionError, match="codec id 7"):
        decompress(7, b"x", max_bytes=10)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedCompressionError):
        max_compressed_size(5, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        decompress(Compression.GZIP, b"", max_bytes=-1)


def test_codecs_are_safe_to_use_from_several_threads():
    # zstd contexts release the GIL while they work; one context shared between threads
    # corrupts memory (it crashed the interpreter before contexts became per thread).
    failures: list[str] = []

    def work(seed: int) -> None:
        data = bytes([seed]) * 50_000 + os.urandom(20_000)
        try:
            for codec in CODECS * 15:
                stream = compress(codec, data)
                if decompress(codec, stream, max_bytes=len(data)) != data:
                    failures.append(f"{codec.name} round trip differs in thread {seed}")
        except Exception as exc:  # report, do not lose it in the thread
            failures.append(f"thread {seed}: {exc!r}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
