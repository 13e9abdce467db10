"""Which ``__consumer_offsets`` partition holds a group: Kafka's ``partitionFor(groupId)``.

Kafka's group coordinator (``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupCoordinatorService.java``) computes ``Utils.abs(groupId.hashCode()) % numPartitions``, with
Java's ``String.hashCode`` and Kafka's ``Utils.abs``
(``clients/src/main/java/org/apache/kafka/common/utils/Utils.java``). A server that shares
partitions, or tools that look up a group's coordinator, must agree with Kafka bit for bit, so
both are written here with Java's semantics:

* ``String.hashCode`` is ``s[0]*31^(n-1) + ... + s[n-1]`` in 32-bit two's-complement arithmetic
  over the string's UTF-16 code units (a character outside the BMP counts as its two surrogates).
  ``"foo"`` -> 101574; ``"polygenelubricants"`` -> -2147483648 (``Integer.MIN_VALUE``).
* ``Utils.abs`` is ``Math.abs`` except that ``Integer.MIN_VALUE`` maps to 0 (``Math.abs`` would
  return it unchanged, a negative partition).

Pure functions; no state.
"""

from __future__ import annotations

__all__ = ["java_abs", "java_string_hash", "partition_for_group"]

_INT32_MIN = -(1 << 31)
_UINT32_MASK = (1 << 32) - 1


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: a signed int32. O(len(text))."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _UINT32_MASK
    return h - (1 << 32) if h >> 31 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs`` of the int32 ``n``: ``abs(n)``, but 0 for ``Integer.MIN_VALUE``."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for_group(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id`` among ``partitions`` (Kafka's
    ``offsets.topic.num.partitions``, default 50).

    Raises:
        ValueError: ``partitions`` is not positive (a programmer error: the topic has at least one).
    """
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, not {partitions}")
    return java_abs(java_string_hash(group_id)) % partitions
