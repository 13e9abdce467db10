"""Zig-zag varints, the variable-length integers inside v2 records.

A record spends one byte on small numbers (offset deltas, short lengths) instead of four or eight.
Two steps, as in protobuf's ``sint32``/``sint64`` and Kafka's ``ByteUtils``:

1. zig-zag maps signed to unsigned so that small magnitudes stay small:
   ``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...``, i.e. ``(v << 1) ^ (v >> 31)`` (``>> 63`` for longs);
2. the unsigned value is written as LEB128: 7 bits per byte, least significant group first,
   bit 7 (0x80) set on every byte but the last.

A varint (int32) takes at most 5 bytes, a varlong (int64) at most 10. Examples::

    0 -> 00    -1 -> 01    1 -> 02    63 -> 7e    -64 -> 7f    64 -> 80 01    -65 -> 81 01
    300 -> d8 04

Reading follows Kafka: a 5th (10th) byte that still has its continuation bit set is an error
("Varint is too long"); bits beyond 32 (64) in the last byte are dropped, as Java's int (long)
arithmetic drops them. Reads past the end of the buffer are errors, never ``IndexError``.

Writers append to a ``bytearray``; readers take any buffer plus a position and return
``(value, next_position)``. Values outside int32 (int64) are programmer errors (``ValueError``).
"""

from __future__ import annotations

from .errors import CorruptRecordError

__all__ = [
    "MAX_VARINT_SIZE",
    "MAX_VARLONG_SIZE",
    "SMALL_VARINT_BYTES",
    "SMALL_VARINT_LIMIT",
    "read_unsigned_varint_within",
    "read_varint",
    "read_varlong",
    "size_of_varint",
    "size_of_varlong",
    "unsigned_varint_bytes",
    "varint_bytes",
    "varlong_bytes",
    "write_varint",
    "write_varlong",
]

MAX_VARINT_SIZE = 5
MAX_VARLONG_SIZE = 10

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT32_MASK = (1 << 32) - 1
_UINT64_MASK = (1 << 64) - 1

# Encodings of the values most records use (offset deltas, timestamp deltas, lengths up to 8 KiB),
# computed once: one list index instead of a loop per field. The range is that of 1- and 2-byte
# zig-zag varints; varint and varlong encodings agree on it. Hot loops elsewhere in the package
# index SMALL_VARINT_BYTES[value + SMALL_VARINT_LIMIT] directly for
# -SMALL_VARINT_LIMIT <= value < SMALL_VARINT_LIMIT.
SMALL_VARINT_LIMIT = _TABLE_LIMIT = 1 << 13


def _encode_unsigned(raw: int) -> bytes:
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def unsigned_varint_bytes(value: int) -> bytes:
    """``value`` (0..2**64-1) as an unsigned LEB128 varint, step 2 alone (Kafka's
    ``ByteUtils.writeUnsignedVarint``; also protobuf's tags, lengths and ``uint64`` fields,
    which the Session stream's envelopes are written with)."""
    if not 0 <= value <= _UINT64_MASK:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _SMALL_UNSIGNED[value] if value < 0x80 else _encode_unsigned(value)


_SMALL_UNSIGNED = [bytes((v,)) for v in range(0x80)]

SMALL_VARINT_BYTES: list[bytes] = [
    _encode_unsigned((v << 1) ^ (v >> 63)) for v in range(-_TABLE_LIMIT, _TABLE_LIMIT)
]


def varint_bytes(value: int) -> bytes:
    """The zig-zag varint encoding of the int32 ``value``. O(1) for |value| <= 8192."""
    if -_TABLE_LIMIT <= value < _TABLE_LIMIT:
        return SMALL_VARINT_BYTES[value + _TABLE_LIMIT]
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint value {value} is outside int32")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & _UINT32_MASK)


def varlong_bytes(value: int) -> bytes:
    """The zig-zag varlong encoding of the int64 ``value``. O(1) for |value| <= 8192."""
    if -_TABLE_LIMIT <= value < _TABLE_LIMIT:
        return SMALL_VARINT_BYTES[value + _TABLE_LIMIT]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong value {value} is outside int64")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & _UINT64_MASK)


def write_varint(out: bytearray, value: int) -> None:
    """Append the zig-zag varint encoding of the int32 ``value`` to ``out``."""
    out += varint_bytes(value)


def write_varlong(out: bytearray, value: int) -> None:
    """Append the zig-zag varlong encoding of the int64 ``value`` to ``out``."""
    out += varlong_bytes(value)


def _size_of_unsigned(raw: int) -> int:
    # Bytes of 7-bit groups: 1 for 0..127, 2 for 128..16383, ...
    return max(1, (raw.bit_length() + 6) // 7)


def size_of_varint(value: int) -> int:
    """Bytes the zig-zag varint encoding of the int32 ``value`` takes (1-5)."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint value {value} is outside int32")
    return _size_of_unsigned(((value << 1) ^ (value >> 31)) & _UINT32_MASK)


def size_of_varlong(value: int) -> int:
    """Bytes the zig-zag varlong encoding of the int64 ``value`` takes (1-10)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong value {value} is outside int64")
    return _size_of_unsigned(((value << 1) ^ (value >> 63)) & _UINT64_MASK)


def _read_unsigned(
    buf: bytes | bytearray | memoryview, position: int, max_size: int, what: str
) -> tuple[int, int]:
    raw = 0
    shift = 0
    end = len(buf)
    for i in range(position, position + max_size):
        if i >= end or i < 0:
            raise CorruptRecordError(
                f"{what} at position {position} is truncated: the buffer ends at {end} "
                f"after {max(i - position, 0)} of its bytes"
            )
        byte = buf[i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return raw, i + 1
        shift += 7
    raise CorruptRecordError(
        f"{what} at position {position} is too long: byte {max_size} still has its "
        f"continuation bit set (at most {max_size} bytes)"
    )


def read_unsigned_varint_within(
    buf: bytes | bytearray | memoryview, position: int, end: int
) -> tuple[int, int] | None:
    """The unsigned LEB128 varint (protobuf's tags, lengths and ``uint64``: at most
    ``MAX_VARLONG_SIZE`` bytes) at ``position``, ending before ``end``, and the position after
    it; None when it is truncated or too long. For the hand-written protobuf walkers
    (server/rpc/decoding.py, server/cluster/fetch_session_wire.py), which hand bytes they do
    not take to protobuf's own parser rather than raise."""
    raw = shift = 0
    for index in range(position, min(position + MAX_VARLONG_SIZE, end)):
        byte = buf[index]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return raw, index + 1
        shift += 7
    return None


def read_varint(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """Read the zig-zag varint at ``position``; return ``(value, next_position)``.

    Raises:
        CorruptRecordError: the buffer ends inside the varint, or it is longer than 5 bytes.
    """
    raw, next_position = _read_unsigned(buf, position, MAX_VARINT_SIZE, "varint")
    raw &= _UINT32_MASK
    return (raw >> 1) ^ -(raw & 1), next_position


def read_varlong(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """Read the zig-zag varlong at ``position``; return ``(value, next_position)``.

    Raises:
        CorruptRecordError: the buffer ends inside the varlong, or it is longer than 10 bytes.
    """
    raw, next_position = _read_unsigned(buf, position, MAX_VARLONG_SIZE, "varlong")
    raw &= _UINT64_MASK
    return (raw >> 1) ^ -(raw & 1), next_position
