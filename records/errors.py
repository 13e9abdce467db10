"""The error trees of ``stratalog.records``.

Every error raised while decoding or validating the untrusted bytes of a record batch is a
:class:`RecordError`; every error raised while parsing the names and small files around the
batches (the modules :mod:`stratalog.records.log_layout` maps) is a :class:`LayoutError`. Messages name the problem
with positions, lines and byte counts, so that a client or an operator can tell *where* input is
broken, not only that it is; they never name a file path, which only the caller that opened the
file knows (the storage engine wraps these errors in its own, adding the path). Programmer errors
(calling an API with the wrong types) are ``TypeError``/``ValueError``/``AssertionError`` as
usual, not part of these trees.

    RecordError
    ├── CorruptRecordError        bytes do not form a valid batch: CRC mismatch, truncated input,
    │   │                         impossible lengths, bytes left over (Kafka: CorruptRecordException)
    │   ├── DecompressionLimitError  a compressed records region that decompresses to more than
    │   │                         the caller's limit (a decompression bomb); decompression stopped
    │   │                         at the limit
    │   └── CorruptMessageError   a key or value in one of Kafka's message schemas (the records of
    │       │                     __consumer_offsets) that does not parse: truncated, impossible
    │       │                     lengths, a null where none is allowed (names message, field,
    │       │                     position)
    │       ├── UnsupportedMessageVersionError  a version the message's schema does not have
    │       └── UnknownRecordTypeError  a __consumer_offsets key whose type (its version prefix)
    │                             no schema has (Kafka: UnknownRecordTypeException)
    └── InvalidRecordError        well-formed bytes with a value we must refuse: unsupported magic,
        │                         non-zero client base offset, bad record counts (InvalidRecordException)
        ├── UnsupportedCompressionError   codec id 5-7
        └── RecordTooLargeError           a batch over a size limit (RecordTooLargeException)

    LayoutError                   a name or a metadata file of a log directory that does not parse
    ├── InvalidFileNameError      not <offset>.<suffix> (also a ValueError, as Kafka's
    │                             NumberFormatException)
    ├── InvalidTopicNameError     a topic name, partition or partition directory name not allowed
    ├── CorruptIndexEntryError    an index entry that cannot be read (a .txnindex version above 0)
    ├── CorruptSnapshotError      a producer snapshot that does not parse (Kafka's
    │                             CorruptSnapshotException)
    └── CorruptOffsetCheckpointError  offset checkpoint text not in Kafka's format (names the line)

The two trees are separate because their faults are: a bad batch comes from a client (or is
damage in a segment), a bad name or checkpoint is damage in a log directory, which no client
request can cause.
"""

from __future__ import annotations

__all__ = [
    "CorruptIndexEntryError",
    "CorruptMessageError",
    "CorruptOffsetCheckpointError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "DecompressionLimitError",
    "InvalidFileNameError",
    "InvalidRecordError",
    "InvalidTopicNameError",
    "LayoutError",
    "RecordError",
    "RecordTooLargeError",
    "UnknownRecordTypeError",
    "UnsupportedCompressionError",
    "UnsupportedMessageVersionError",
]


class RecordError(Exception):
    """Base of every error the record codec raises for bad input bytes."""


class CorruptRecordError(RecordError):
    """The bytes are not a valid record batch (CRC mismatch, truncation, bad length fields)."""


class DecompressionLimitError(CorruptRecordError):
    """A compressed records region would decompress to more bytes than the caller allowed.

    Raised as soon as the output passes the limit, so no more than the limit (plus one codec
    block) was ever held. A caller that passed a budget of its own (the server's bound per
    Produce) catches this class to say which limit it was.
    """


class CorruptMessageError(CorruptRecordError):
    """A message of one of Kafka's schemas (a ``__consumer_offsets`` key or value) that does not
    parse. ``message`` names the schema (``OffsetCommitValue``), ``position`` the byte at fault
    (``None`` when the fault is not at one byte), ``field`` the field's path in the message
    (``members[0].clientId``) and ``problem`` what is wrong there, when the fault is in a field
    (a typed layer words its own error from them)."""

    def __init__(
        self,
        text: str,
        *,
        message: str,
        position: int | None = None,
        field: str | None = None,
        problem: str | None = None,
    ) -> None:
        super().__init__(text)
        self.message = message
        self.position = position
        self.field = field
        self.problem = problem


class UnsupportedMessageVersionError(CorruptMessageError):
    """A version the message's schema does not define ("Can't read version 5 of
    OffsetCommitValue"); ``version`` is the version found."""

    def __init__(self, text: str, *, message: str, version: int) -> None:
        super().__init__(text, message=message, position=0)
        self.version = version


class UnknownRecordTypeError(CorruptMessageError):
    """A ``__consumer_offsets`` key whose record type (the key's version prefix) no schema
    defines; ``record_type`` is the type found. Kafka's loader skips such records
    (``CoordinatorLoader.UnknownRecordTypeException``)."""

    def __init__(self, text: str, *, record_type: int) -> None:
        super().__init__(text, message="key", position=0)
        self.record_type = record_type


class InvalidRecordError(RecordError):
    """The bytes parse, but hold a value that is not allowed (magic, counts, offsets)."""


class UnsupportedCompressionError(InvalidRecordError):
    """The attributes name a compression codec id that Kafka does not define (5, 6 or 7)."""


class RecordTooLargeError(InvalidRecordError):
    """A batch (or an append) is larger than the configured limit."""


class LayoutError(Exception):
    """Base of every error the on-disk layouts (:mod:`stratalog.records.log_layout` maps them)
    raise for names and bytes."""


class InvalidFileNameError(LayoutError, ValueError):
    """A file name that does not start with a decimal offset followed by a dot."""


class InvalidTopicNameError(LayoutError):
    """A topic name, partition number or partition directory name that is not allowed."""


class CorruptIndexEntryError(LayoutError):
    """An index entry that cannot be read; ``version`` is the version byte found."""

    def __init__(self, message: str, *, version: int) -> None:
        super().__init__(message)
        self.version = version


class CorruptSnapshotError(LayoutError):
    """A producer snapshot that is truncated, inconsistent or fails its CRC."""


class CorruptOffsetCheckpointError(LayoutError):
    """Offset checkpoint text that Kafka would refuse to read.

    ``line_number`` is the 1-based line at fault, or ``None`` when the fault is not one line
    (bytes that are not UTF-8, an entry count that does not match the entries).
    """

    def __init__(self, message: str, *, line_number: int | None = None) -> None:
        super().__init__(message)
        self.line_number = line_number
