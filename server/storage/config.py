"""Per-log configuration: Kafka's topic configs, their defaults, ranges and derived values.

A partition log is governed by a handful of Kafka topic configs (``segment.bytes``,
``segment.ms``, ``index.interval.bytes``, ``retention.ms`` ...). :class:`LogConfig` holds them as
typed fields with the unit last in the name (``segment_bytes``, ``retention_ms``), built either
directly or from a mapping keyed by Kafka's names, the way a topic's configs arrive from a user,
a TOML file or the network. Every value is checked against Kafka's validator for that config, so
a log never runs with a setting Kafka would refuse.

Defaults and ranges are Kafka's (``LogConfig.java``, trunk late 2024; see
docs/kafka-behaviours.md#configuration). Where Kafka 4.0 changed a default
(``message.timestamp.after.max.ms`` = 1 h, ``segment.bytes`` >= 1 MiB) the snapshot's value is
kept; a server may pass its own defaults to :meth:`LogConfig.from_mapping`.
"""

from __future__ import annotations

import dataclasses
import random
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stratalog.records.batch import TimestampType

from .errors import InvalidConfigError

__all__ = [
    "CLEANUP_POLICY_COMPACT",
    "CLEANUP_POLICY_DELETE",
    "PRODUCER_ID_EXPIRATION_MS_DEFAULT",
    "TOPIC_CONFIG_KINDS",
    "TOPIC_CONFIG_NAMES",
    "LogConfig",
]

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# Kafka's producer.id.expiration.ms default (a broker setting, not a topic config: the
# LogManager's ServerLogSettings carries it to every PartitionLog): how long a producer's state
# outlives its last write.
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 86_400_000

CLEANUP_POLICY_DELETE = "delete"
CLEANUP_POLICY_COMPACT = "compact"

# The names Kafka uses on the wire and in files for the two timestamp types.
_TIMESTAMP_TYPE_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
_TIMESTAMP_TYPES_BY_NAME = {name: kind for kind, name in _TIMESTAMP_TYPE_NAMES.items()}


@dataclass(frozen=True, slots=True)
class _Spec:
    """How one Kafka topic config maps onto a field: its type and its valid range."""

    name: str  # Kafka's topic config name
    field: str  # LogConfig field
    kind: str  # "int" (Java int), "long", "double", "bool", "timestamp_type", "list"
    minimum: int | None = None  # inclusive lower bound for int/long/double (Kafka's atLeast)
    maximum: int | None = None  # inclusive upper bound (Kafka's between), or None


# One line per Kafka topic config, in the order of Kafka's table
# (docs/kafka-behaviours.md#configuration).
_SPECS: tuple[_Spec, ...] = (
    _Spec("segment.bytes", "segment_bytes", "int", 14),
    _Spec("segment.ms", "segment_ms", "long", 1),
    _Spec("segment.jitter.ms", "segment_jitter_ms", "long", 0),
    _Spec("segment.index.bytes", "segment_index_bytes", "int", 4),
    _Spec("index.interval.bytes", "index_interval_bytes", "int", 0),
    _Spec("message.timestamp.type", "message_timestamp_type", "timestamp_type"),
    _Spec(
        "message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", "long", 0
    ),
    _Spec("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "long", 0),
    _Spec("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "long", 0),
    _Spec("retention.ms", "retention_ms", "long", -1),
    _Spec("retention.bytes", "retention_bytes", "long", None),
    _Spec("file.delete.delay.ms", "file_delete_delay_ms", "long", 0),
    _Spec("flush.messages", "flush_messages", "long", 1),
    _Spec("flush.ms", "flush_ms", "long", 0),
    _Spec("cleanup.policy", "cleanup_policy", "list"),
    _Spec("max.message.bytes", "max_message_bytes", "int", 0),
    _Spec("preallocate", "preallocate", "bool"),
    # Read by the cluster controller only (server/cluster/leader_election.py), not by the log.
    _Spec("unclean.leader.election.enable", "unclean_leader_election_enable", "bool"),
    _Spec("max.compaction.lag.ms", "max_compaction_lag_ms", "long", 1),
    # The log cleaner's (cleanup.policy=compact): cleaner.py and cleaner_manager.py.
    _Spec("min.compaction.lag.ms", "min_compaction_lag_ms", "long", 0),
    _Spec("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "double", 0, 1),
    _Spec("delete.retention.ms", "delete_retention_ms", "long", 0),
    _Spec("local.retention.ms", "local_retention_ms", "long", -2),
    _Spec("local.retention.bytes", "local_retention_bytes", "long", -2),
    # Replication (issue 17, server/cluster): the in-sync replicas an acks=all produce needs.
    _Spec("min.insync.replicas", "min_insync_replicas", "int", 1),
)
_SPECS_BY_NAME = {spec.name: spec for spec in _SPECS}
_SPECS_BY_FIELD = {spec.field: spec for spec in _SPECS}

TOPIC_CONFIG_NAMES: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
"""Every topic config name :class:`LogConfig` understands, in Kafka's spelling."""
TOPIC_CONFIG_KINDS: Mapping[str, str] = types.MappingProxyType(
    {spec.name: spec.kind for spec in _SPECS})
"""Each topic config's type: "int" (a Java int), "long", "double", "bool", "timestamp_type"
(CreateTime or LogAppendTime) or "list" (comma-separated), as DescribeConfigs reports it."""

_VALID_CLEANUP_POLICIES = (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition log; immutable and validated on creation.

    Holds one field per Kafka topic config (see :data:`TOPIC_CONFIG_NAMES`), with Kafka's
    defaults. Invariant: every field is within Kafka's range for it (checked in
    ``__post_init__``; an out-of-range value raises :class:`InvalidConfigError` naming the Kafka
    config and the value). Frozen, so it may be shared between threads and logs; a config change
    is a new object (``dataclasses.replace`` or :meth:`from_mapping` with ``defaults``).
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_difference_max_ms: int = INT64_MAX
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = INT64_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60000
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    cleanup_policy: tuple[str, ...] = (CLEANUP_POLICY_DELETE,)
    max_message_bytes: int = 1048588
    preallocate: bool = False
    unclean_leader_election_enable: bool = False
    max_compaction_lag_ms: int = INT64_MAX
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    min_insync_replicas: int = 1

    def __post_init__(self) -> None:
        for spec in _SPECS:
            value = getattr(self, spec.field)
            checked = _check_typed(spec, value)
            if checked is not value:
                # Normalise (e.g. a plain int 0 for the timestamp type, a list policy) in place.
                object.__setattr__(self, spec.field, checked)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, str | int | bool], defaults: LogConfig | None = None
    ) -> LogConfig:
        """Build a config from Kafka topic config names, overriding ``defaults``.

        Values may be strings as Kafka receives them (``"1048576"``, ``"true"``,
        ``"compact,delete"``, ``"LogAppendTime"``; surrounding whitespace is ignored, as Kafka's
        ``ConfigDef`` trims) or already-typed ints/bools.

        Raises:
            InvalidConfigError: an unknown name, a value that does not parse as the config's type,
                or a value outside Kafka's range; the message names the key and the value.
        """
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, raw in mapping.items():
            spec = _SPECS_BY_NAME.get(name)
            if spec is None:
                raise InvalidConfigError(
                    f"unknown topic config {name!r} (value {raw!r}); known configs: "
                    + ", ".join(TOPIC_CONFIG_NAMES)
                )
            changes[spec.field] = _parse(spec, raw)
        return dataclasses.replace(base, **changes) if changes else base

    def to_mapping(self) -> dict[str, str]:
        """Every effective config as Kafka names and Kafka's string forms."""
        result: dict[str, str] = {}
        for spec in _SPECS:
            value = getattr(self, spec.field)
            if spec.kind == "bool":
                result[spec.name] = "true" if value else "false"
            elif spec.kind == "timestamp_type":
                result[spec.name] = _TIMESTAMP_TYPE_NAMES[value]
            elif spec.kind == "list":
                result[spec.name] = ",".join(value)
            elif spec.kind == "double":
                result[spec.name] = repr(float(value))
            else:
                result[spec.name] = str(value)
        return result

    # ---------------------------------------------------------------- derived values

    def random_segment_jitter_ms(self, rng: random.Random | None = None) -> int:
        """A jitter for one new segment: 0, or uniform in [0, min(segment.jitter.ms, segment.ms)).

        Kafka's ``randomSegmentJitter``; drawn once per segment object and subtracted from
        ``segment.ms`` in the time-based roll condition, so that partitions created together do
        not all roll together.
        """
        if self.segment_jitter_ms == 0:
            return 0
        draw = rng.randrange(INT32_MAX) if rng is not None else random.randrange(INT32_MAX)
        return draw % min(self.segment_jitter_ms, self.segment_ms)

    @property
    def max_segment_ms(self) -> int:
        """``segment.ms``, capped by ``max.compaction.lag.ms`` on compacted topics."""
        if self.is_compacted and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def init_file_size(self) -> int:
        """Initial length of a new ``.log`` file: ``segment.bytes`` when preallocating, else 0."""
        return self.segment_bytes if self.preallocate else 0

    @property
    def is_compacted(self) -> bool:
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy

    @property
    def is_delete(self) -> bool:
        """Whether time/size retention deletes segments (``cleanup.policy`` contains delete)."""
        return CLEANUP_POLICY_DELETE in self.cleanup_policy

    @property
    def effective_timestamp_before_max_ms(self) -> int:
        """``message.timestamp.before.max.ms``, or the deprecated difference config if unset."""
        if self.message_timestamp_before_max_ms != INT64_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def effective_timestamp_after_max_ms(self) -> int:
        """``message.timestamp.after.max.ms``, or the deprecated difference config if unset."""
        if self.message_timestamp_after_max_ms != INT64_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms


# -------------------------------------------------------------------- parsing and checks


def _parse(spec: _Spec, raw: object) -> Any:
    """Turn a mapping value (string or typed) into the field's type; range checked later."""
    if spec.kind in ("int", "long"):
        if isinstance(raw, bool):
            raise _invalid(spec, raw, "expected an integer, not a boolean")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            text = raw.strip()
            # Java's parseInt/parseLong: optional sign and decimal digits, nothing else.
            digits = text[1:] if text[:1] in ("+", "-") else text
            if not digits.isascii() or not digits.isdigit():
                raise _invalid(spec, raw, "not an integer")
            return int(text)
        raise _invalid(spec, raw, f"expected a string or an int, got {type(raw).__name__}")
    if spec.kind == "double":
        if isinstance(raw, bool):
            raise _invalid(spec, raw, "expected a number, not a boolean")
        if isinstance(raw, int | float):
            return float(raw)
        if isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                raise _invalid(spec, raw, "not a number") from None
            return value
        raise _invalid(spec, raw, f"expected a string or a number, got {type(raw).__name__}")
    if spec.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            text = raw.strip().lower()
            if text in ("true", "false"):
                return text == "true"
        raise _invalid(spec, raw, "expected true or false")
    if spec.kind == "timestamp_type":
        if isinstance(raw, str):
            kind = _TIMESTAMP_TYPES_BY_NAME.get(raw.strip())
            if kind is not None:
                return kind
        raise _invalid(spec, raw, "expected CreateTime or LogAppendTime")
    if spec.kind == "list":
        if isinstance(raw, str):
            text = raw.strip()
            return tuple(item.strip() for item in text.split(",")) if text else ()
        raise _invalid(spec, raw, "expected a comma-separated string")
    raise AssertionError(f"unhandled config kind {spec.kind}")


def _check_typed(spec: _Spec, value: object) -> Any:
    """Check a typed field value against Kafka's validator; returns the normalised value."""
    if spec.kind in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _invalid(spec, value, "expected an integer")
        low, high = (INT32_MIN, INT32_MAX) if spec.kind == "int" else (INT64_MIN, INT64_MAX)
        if not low <= value <= high:
            java_type = "int" if spec.kind == "int" else "long"
            raise _invalid(spec, value, f"does not fit a Java {java_type} [{low}, {high}]")
        if spec.minimum is not None and value < spec.minimum:
            raise _invalid(spec, value, f"value must be at least {spec.minimum}")
        return value
    if spec.kind == "double":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _invalid(spec, value, "expected a number")
        value = float(value)
        if value != value:  # NaN
            raise _invalid(spec, value, "not a number")
        if spec.minimum is not None and value < spec.minimum:
            raise _invalid(spec, value, f"value must be at least {spec.minimum}")
        if spec.maximum is not None and value > spec.maximum:
            raise _invalid(spec, value, f"value must be at most {spec.maximum}")
        return value
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise _invalid(spec, value, "expected a boolean")
        return value
    if spec.kind == "timestamp_type":
        if isinstance(value, TimestampType):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return TimestampType(value)
            except ValueError:
                pass
        raise _invalid(spec, value, "expected CreateTime or LogAppendTime")
    if spec.kind == "list":
        if isinstance(value, str) or not isinstance(value, (tuple, list)):
            raise _invalid(spec, value, "expected a tuple of policies")
        for item in value:
            if item not in _VALID_CLEANUP_POLICIES:
                raise _invalid(
                    spec, value, f"{item!r} is not one of {', '.join(_VALID_CLEANUP_POLICIES)}"
                )
        return tuple(value)
    raise AssertionError(f"unhandled config kind {spec.kind}")


def _invalid(spec: _Spec, value: object, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"invalid value {value!r} for topic config {spec.name!r}: {why}")
