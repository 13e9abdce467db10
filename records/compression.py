"""The four compression codecs of Kafka record batches, as Kafka's writers frame them.

A compressed batch keeps its 61-byte header in the clear and replaces the records region with one
compressed stream of the concatenated records. The libraries do the compression; this module only
adds the framing Kafka uses and turns every library failure into a :class:`CorruptRecordError`
that names the codec:

* gzip (codec 1): an RFC 1952 stream (``zlib`` with ``wbits=31``), as ``GZIPOutputStream`` writes.
* snappy (codec 2): snappy-java's ``SnappyOutputStream`` ("xerial") framing around raw snappy
  blocks (``cramjam.snappy`` raw)::

      offset size field
           0    8 magic          0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
           8    4 version        int32, 1
          12    4 compatible     int32, 1
          16    … blocks         [int32 compressed length][raw snappy block], each block holding
                                 up to 32 KiB of input (snappy-java's default block size)

  Like ``SnappyInputStream``, the reader also accepts one bare raw snappy block (no magic) and
  concatenated xerial streams.
* lz4 (codec 3): the LZ4 frame format (magic ``0x184D2204``) with independent 64 KiB blocks, no
  content size and no checksums, which is what Kafka's ``Lz4BlockOutputStream`` writes.
* zstd (codec 4): standard zstd frames; Kafka's streaming writer omits the content size.

Decompression is bounded: ``decompress(..., max_bytes=n)`` stops as soon as the output would pass
``n`` bytes and raises, so a small batch cannot expand into gigabytes (a "decompression bomb").
Concatenated gzip members / zstd and lz4 frames are read as one stream; bytes after the last
complete member or frame (which Kafka's writers never produce) are an error here.

Sans-IO: every call works on whole ``bytes`` in memory. Thread-safe: the only state is a cache
of zstd contexts, kept per thread.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import NoReturn

import cramjam
import lz4.frame
import zstandard

from .batch import Compression
from .errors import CorruptRecordError, DecompressionLimitError, UnsupportedCompressionError

__all__ = [
    "DEFAULT_LEVELS",
    "SNAPPY_BLOCK_SIZE_BYTES",
    "XERIAL_HEADER",
    "compress",
    "decompress",
    "max_compressed_size",
]

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_MAGIC = XERIAL_HEADER[:8]
SNAPPY_BLOCK_SIZE_BYTES = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")

# Compression levels used when the caller names none. gzip -1 and zstd 3 are Kafka's defaults
# (compression.gzip.level, compression.zstd.level). For lz4 Kafka >= 3.8 defaults to the slow
# high-compression level 9; we default to the fast compressor (0), which is what Kafka used
# before KIP-390 and what producers care about. Readers do not depend on the level.
DEFAULT_LEVELS: dict[Compression, int] = {
    Compression.GZIP: 6,
    Compression.LZ4: 0,
    Compression.ZSTD: 3,
}

# zstd contexts are costly to create and reusable, but not safe to share between threads (the
# library releases the GIL while it works, and the server decodes batches in executor threads):
# each thread keeps its own compressor per level and its own decompressor.
_zstd_contexts = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    compressors = getattr(_zstd_contexts, "compressors", None)
    if compressors is None:
        compressors = _zstd_contexts.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = zstandard.ZstdCompressor(
            level=level, write_content_size=False
        )
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_zstd_contexts, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_contexts.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def compress(
    codec: Compression, data: bytes | bytearray | memoryview, *, level: int | None = None
) -> bytes:
    """Compress ``data`` into the stream Kafka's writer for ``codec`` would produce.

    ``level`` overrides :data:`DEFAULT_LEVELS` (ignored by snappy). ``Compression.NONE`` returns
    the data unchanged. Runtime O(len(data)).
    """
    if codec == Compression.GZIP:
        # compressobj rather than zlib.compress: only it writes the gzip wrapper (wbits=31).
        compressor = zlib.compressobj(
            DEFAULT_LEVELS[codec] if level is None else level, zlib.DEFLATED, 31
        )
        return compressor.compress(data) + compressor.flush()
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=DEFAULT_LEVELS[codec] if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
    if codec == Compression.ZSTD:
        return _zstd_compressor(DEFAULT_LEVELS[codec] if level is None else level).compress(data)
    if codec == Compression.NONE:
        return bytes(data)
    raise UnsupportedCompressionError(f"compression codec id {int(codec)} is not defined")


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    pack = _INT32.pack
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE_BYTES):
        block = bytes(compress_raw(view[start : start + SNAPPY_BLOCK_SIZE_BYTES]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def max_compressed_size(codec: Compression, size_bytes: int) -> int:
    """An upper bound of the compressed size of ``size_bytes`` of input (incompressible input).

    Cheap arithmetic from each format's worst case, used for batch size estimates. O(1).
    """
    if codec == Compression.NONE:
        return size_bytes
    if codec == Compression.GZIP:
        # deflate stored blocks: 5 bytes per 16 KiB block (zlib's deflateBound is tighter),
        # plus the 10-byte gzip header and 8-byte trailer.
        return size_bytes + 5 * (size_bytes // 16383 + 1) + 18 + 8
    if codec == Compression.SNAPPY:
        blocks = size_bytes // SNAPPY_BLOCK_SIZE_BYTES + 1
        # snappy's MaxCompressedLength: 32 + n + n / 6, per block, plus the length prefix.
        return len(XERIAL_HEADER) + size_bytes + size_bytes // 6 + blocks * (32 + 4)
    if codec == Compression.LZ4:
        # Blocks that do not compress are stored raw: 4-byte block size + data; 7-byte frame
        # header and 4-byte end mark.
        return size_bytes + 4 * (size_bytes // 65536 + 1) + 7 + 4
    if codec == Compression.ZSTD:
        # ZSTD_COMPRESSBOUND: n + n/256 + (n < 128 KiB ? (128 KiB - n) >> 11 : 0), plus the
        # frame header (at most 18 bytes) and raw-block headers.
        margin = ((128 * 1024 - size_bytes) >> 11) if size_bytes < 128 * 1024 else 0
        return size_bytes + (size_bytes >> 8) + margin + 18 + 3 * (size_bytes // 131072 + 1)
    raise UnsupportedCompressionError(f"compression codec id {int(codec)} is not defined")


def decompress(
    codec: Compression, data: bytes | bytearray | memoryview, *, max_bytes: int
) -> bytes:
    """Decompress one Kafka compressed records stream, producing at most ``max_bytes`` bytes.

    Raises:
        CorruptRecordError: the stream is truncated, malformed or has trailing bytes. The
            message names the codec.
        DecompressionLimitError: (a CorruptRecordError) the stream would decompress to more
            than ``max_bytes`` bytes; at most ``max_bytes`` plus one codec block was produced.
        UnsupportedCompressionError: ``codec`` is not one of Kafka's.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    try:
        if codec == Compression.GZIP:
            return _gzip_decompress(data, max_bytes)
        if codec == Compression.SNAPPY:
            return _xerial_decompress(data, max_bytes)
        if codec == Compression.LZ4:
            return _lz4_decompress(data, max_bytes)
        if codec == Compression.ZSTD:
            return _zstd_decompress(data, max_bytes)
    except CorruptRecordError:
        raise
    except (zlib.error, cramjam.DecompressionError, zstandard.ZstdError, RuntimeError) as exc:
        # lz4.frame raises RuntimeError for malformed frames.
        raise CorruptRecordError(
            f"{codec.name.lower()} stream of {len(data)} bytes is corrupt: {exc}"
        ) from None
    if codec == Compression.NONE:
        if len(data) > max_bytes:
            _raise_too_large(codec, len(data), max_bytes)
        return bytes(data)
    raise UnsupportedCompressionError(f"compression codec id {int(codec)} is not defined")


def _raise_too_large(codec: Compression, compressed_bytes: int, max_bytes: int) -> NoReturn:
    raise DecompressionLimitError(
        f"{codec.name.lower()} stream of {compressed_bytes} bytes decompresses to more than "
        f"{max_bytes} bytes (the decompression limit)"
    )


def _gzip_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    produced = 0
    remaining = bytes(data)
    while True:
        decompressor = zlib.decompressobj(31)
        # max_length one past the budget: getting that byte proves the limit is exceeded.
        chunk = decompressor.decompress(remaining, max_bytes - produced + 1)
        produced += len(chunk)
        if produced > max_bytes:
            _raise_too_large(Compression.GZIP, len(data), max_bytes)
        parts.append(chunk)
        if not decompressor.eof:
            raise CorruptRecordError(
                f"gzip stream of {len(data)} bytes is truncated after {produced} decompressed bytes"
            )
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(parts)


def _xerial_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    data = bytes(data)
    decompress_raw = cramjam.snappy.decompress_raw
    raw_len = cramjam.snappy.decompress_raw_len
    if not data.startswith(_XERIAL_MAGIC):
        # snappy-java's SnappyInputStream reads a stream without the magic as one raw block.
        if raw_len(data) > max_bytes:
            _raise_too_large(Compression.SNAPPY, len(data), max_bytes)
        return bytes(decompress_raw(data))
    end = len(data)
    if end < len(XERIAL_HEADER):
        raise CorruptRecordError(
            f"snappy stream of {end} bytes is truncated inside its {len(XERIAL_HEADER)}-byte "
            "xerial header"
        )
    parts: list[bytes] = []
    produced = 0
    position = len(XERIAL_HEADER)
    unpack_from = _INT32.unpack_from
    while position < end:
        if data.startswith(_XERIAL_MAGIC, position):
            # snappy-java reads concatenated streams: a second header where a block would start.
            if position + len(XERIAL_HEADER) > end:
                raise CorruptRecordError(
                    f"snappy stream of {end} bytes is truncated inside the xerial header at "
                    f"{position}"
                )
            position += len(XERIAL_HEADER)
            continue
        if position + 4 > end:
            raise CorruptRecordError(
                f"snappy stream of {end} bytes is truncated in the block length at {position}"
            )
        (block_size,) = unpack_from(data, position)
        position += 4
        if block_size < 0 or position + block_size > end:
            raise CorruptRecordError(
                f"snappy block at position {position - 4} declares {block_size} bytes but "
                f"{end - position} remain"
            )
        block = data[position : position + block_size]
        position += block_size
        produced += raw_len(block)
        if produced > max_bytes:
            _raise_too_large(Compression.SNAPPY, end, max_bytes)
        parts.append(bytes(decompress_raw(block)))
    return b"".join(parts)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    produced = 0
    remaining = bytes(data)
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        chunk = decompressor.decompress(remaining, max_length=max_bytes - produced + 1)
        produced += len(chunk)
        if produced > max_bytes:
            _raise_too_large(Compression.LZ4, len(data), max_bytes)
        parts.append(chunk)
        if not decompressor.eof:
            raise CorruptRecordError(
                f"lz4 stream of {len(data)} bytes is truncated after {produced} decompressed bytes"
            )
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(parts)


# zstd has no output limit per call, so input is fed in slices small enough that one slice cannot
# overshoot the budget by much: a 4-byte RLE block expands to at most 128 KiB (ratio 32768).
_ZSTD_MAX_RATIO = 128 * 1024 // 4
_ZSTD_MIN_SLICE_BYTES = 64


def _zstd_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    view = memoryview(data)
    end = len(view)
    parts: list[bytes] = []
    produced = 0
    position = 0
    context = _zstd_decompressor()
    decompressor = context.decompressobj()
    while True:
        slice_bytes = max(_ZSTD_MIN_SLICE_BYTES, (max_bytes - produced) // _ZSTD_MAX_RATIO)
        chunk = decompressor.decompress(view[position : position + slice_bytes])
        position = min(position + slice_bytes, end)
        produced += len(chunk)
        if produced > max_bytes:
            _raise_too_large(Compression.ZSTD, end, max_bytes)
        parts.append(chunk)
        if decompressor.eof:
            # A frame ended; the rest of this slice, if any, starts the next frame.
            leftover = decompressor.unused_data
            position -= len(leftover)
            if position >= end:
                return b"".join(parts)
            decompressor = context.decompressobj()
        elif position >= end:
            raise CorruptRecordError(
                f"zstd stream of {end} bytes is truncated after {produced} decompressed bytes"
            )
