"""Control records: the markers a transaction coordinator (or KRaft) writes into a partition.

A control batch has the control attribute bit (0x20) set; transaction markers also set the
transactional bit (attributes 0x30) and hold exactly one record. The record's key says what kind
of control record it is, and for a transaction marker the value carries the coordinator epoch::

    key   (4 bytes)  int16 version (0) | int16 type      ControlRecordType below
    value (6 bytes)  int16 version (0) | int32 coordinator_epoch   (ABORT and COMMIT only)

Kafka reads keys and values of version 0 and ignores bytes a newer version may append (its
``ControlRecordType.parse`` and ``EndTransactionMarker.deserialize`` read only the fields they
know); so do we. A key shorter than 4 bytes or a marker value shorter than 6 is corrupt.

Golden (docs/kafka-behaviours.md#record-batch): the record of COMMIT, coordinator epoch 100, at
offset delta 0 and timestamp delta 0 encodes as ``2000000008000000010c00000000006400``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "CONTROL_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "ControlRecordType",
    "EndTransactionMarker",
    "decode_control_key",
    "encode_control_key",
]

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class ControlRecordType(enum.IntEnum):
    """Kafka's ``ControlRecordType`` ids (the second int16 of a control record key)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def encode_control_key(control_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record of ``control_type`` (version 0)."""
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def decode_control_key(key: bytes | None) -> tuple[int, ControlRecordType | int]:
    """Return ``(version, type)`` of a control record key.

    ``type`` is a :class:`ControlRecordType` when known, else the raw int (Kafka maps unknown
    ids to ``UNKNOWN`` rather than failing, so newer control records do not break readers).

    Raises:
        CorruptRecordError: the key is null or shorter than 4 bytes.
        InvalidRecordError: the version is negative (Kafka: "may indicate data corruption").
    """
    if key is None or len(key) < _KEY.size:
        size = "null" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(
            f"control record key is {size}; it needs {_KEY.size} (int16 version, int16 type)"
        )
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    try:
        return version, ControlRecordType(type_id)
    except ValueError:
        return version, type_id


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker, ending one producer's transaction in a partition.

    Invariant: ``type`` is ABORT or COMMIT. Immutable.
    """

    type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"an end transaction marker is ABORT or COMMIT, not {self.type!r}")

    def encode_key(self) -> bytes:
        """The control record key of this marker."""
        return encode_control_key(self.type)

    def encode_value(self) -> bytes:
        """The 6-byte record value: version 0 and the coordinator epoch."""
        return _MARKER_VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> EndTransactionMarker:
        """Decode a marker from a control record's key and value.

        Raises:
            CorruptRecordError: key or value null or too short.
            InvalidRecordError: the key names a control type other than ABORT or COMMIT, or a
                version is negative.
        """
        _, control_type = decode_control_key(key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise InvalidRecordError(
                f"control record of type {control_type!r} is not an end transaction marker"
            )
        if value is None or len(value) < _MARKER_VALUE.size:
            size = "null" if value is None else f"{len(value)} bytes"
            raise CorruptRecordError(
                f"end transaction marker value is {size}; it needs {_MARKER_VALUE.size} "
                "(int16 version, int32 coordinator epoch)"
            )
        version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
        if version < 0:
            raise InvalidRecordError(f"invalid end transaction marker version {version}")
        return cls(ControlRecordType(control_type), coordinator_epoch)
