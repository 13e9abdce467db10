"""The log cleaner's key digest: MurmurHash3_x64_128 of a record key, 16 bytes.

The cleaner's offset map (``server/storage/offset_map.py``) stands for each key by a fixed-size
digest, so that its memory per key does not depend on the key. The digest never leaves the map
(nothing persists it), so any 128-bit hash with good dispersion does: Kafka uses MD5; stratalog
uses MurmurHash3_x64_128 (Austin Appleby's, public domain) because it is a few dozen lines of C
that run without the GIL inside the map's C loops (``records/_speedups.c``), where MD5 would
need a library. Layout of the result::

    [0, 8)   h1, little-endian      (the map's probe starts from bytes [0, 8) read big-endian)
    [8, 16)  h2, little-endian

seed :data:`SEED` (0x9747b28c): the same bytes as the reference implementation's
``MurmurHash3_x64_128(key, len, SEED, out)`` on a little-endian machine. Not seed 0: under it
the empty key (a valid key, distinct from a null one) hashes to sixteen zero bytes, the map's
empty slot.

:func:`key_digest` is the C function when the extension is built, else
:func:`key_digest_reference`, the pure-Python reference it is tested against (slow: ~5 µs for a
short key, against ~0.1 µs in C; it only runs where no compiler was found at install time).
Sans-IO and thread-safe.
"""

from __future__ import annotations

from .accel import key_digest_c

__all__ = ["DIGEST_BYTES", "SEED", "key_digest", "key_digest_reference"]

DIGEST_BYTES = 16
SEED = 0x9747B28C

_MASK = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    k ^= k >> 33
    return k


def key_digest_reference(key: bytes | bytearray | memoryview) -> bytes:
    """MurmurHash3_x64_128(``key``, :data:`SEED`) as 16 bytes (see the module docstring)."""
    data = bytes(key)
    length = len(data)
    h1 = h2 = SEED
    blocks = length // 16
    for i in range(blocks):
        k1 = int.from_bytes(data[16 * i:16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8:16 * i + 16], "little")
        k1 = (_rotl((k1 * _C1) & _MASK, 31) * _C2) & _MASK
        h1 ^= k1
        h1 = (_rotl(h1, 27) + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        k2 = (_rotl((k2 * _C2) & _MASK, 33) * _C1) & _MASK
        h2 ^= k2
        h2 = (_rotl(h2, 31) + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[16 * blocks:]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= (_rotl((k2 * _C2) & _MASK, 33) * _C1) & _MASK
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= (_rotl((k1 * _C1) & _MASK, 31) * _C2) & _MASK
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return h1.to_bytes(8, "little") + h2.to_bytes(8, "little")


key_digest = key_digest_c if key_digest_c is not None else key_digest_reference
