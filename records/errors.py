"""The error tree of ``stratalog.records``.

Every error raised while decoding or validating untrusted bytes is a :class:`RecordError`.
Messages name the problem with positions and byte counts, so that a client or an operator can
tell *where* a batch is broken, not only that it is. Programmer errors (calling an API with the
wrong types) are ``TypeError``/``ValueError``/``AssertionError`` as usual, not part of this tree.

    RecordError
    ├── CorruptRecordError        bytes do not form a valid batch: CRC mismatch, truncated input,
    │                             impossible lengths, bytes left over (Kafka: CorruptRecordException)
    └── InvalidRecordError        well-formed bytes with a value we must refuse: unsupported magic,
        │                         non-zero client base offset, bad record counts (InvalidRecordException)
        ├── UnsupportedCompressionError   codec id 5-7
        └── RecordTooLargeError           a batch over a size limit (RecordTooLargeException)
"""

from __future__ import annotations

__all__ = [
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
]


class RecordError(Exception):
    """Base of every error the record codec raises for bad input bytes."""


class CorruptRecordError(RecordError):
    """The bytes are not a valid record batch (CRC mismatch, truncation, bad length fields)."""


class InvalidRecordError(RecordError):
    """The bytes parse, but hold a value that is not allowed (magic, counts, offsets)."""


class UnsupportedCompressionError(InvalidRecordError):
    """The attributes name a compression codec id that Kafka does not define (5, 6 or 7)."""


class RecordTooLargeError(InvalidRecordError):
    """A batch (or an append) is larger than the configured limit."""
