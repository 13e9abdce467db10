"""CRC-32C (Castagnoli), the checksum of Kafka's v2 record batches.

The work is done by the ``crc32c`` package, which uses the CPU's CRC instructions (SSE 4.2 on
x86-64, the CRC extension on ARMv8) and falls back to a C table implementation; both are far past
anything Python-level code could reach. Check value: ``crc32c(b"123456789") == 0xE3069283``.
"""

from __future__ import annotations

from crc32c import crc32c as _crc32c

__all__ = ["crc32c"]


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return the CRC-32C of ``data`` as an unsigned 32-bit int, continuing from ``value``.

    Accepts any buffer (slices of a ``memoryview`` are checksummed without a copy). O(len(data)).
    """
    return _crc32c(data, value)
