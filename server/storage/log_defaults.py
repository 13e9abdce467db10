"""Server-level storage settings: Kafka's broker ``log.*`` names turned into topic defaults.

A Kafka broker configures storage twice: broker configs (``log.segment.bytes``,
``log.retention.hours`` ...) give every topic its defaults, and topic configs
(``segment.bytes``, ``retention.ms`` ...) override them per topic. A few broker configs have no
topic counterpart and govern the background jobs (``log.retention.check.interval.ms``,
``log.flush.offset.checkpoint.interval.ms`` ...). :func:`parse_server_defaults` splits one
mapping of such names into the two:

* a :class:`~stratalog.server.storage.config.LogConfig` of topic defaults, with Kafka's
  precedence where several broker names feed one topic config (``log.retention.ms`` over
  ``log.retention.minutes`` over ``log.retention.hours``; ``log.roll.ms`` over
  ``log.roll.hours``; a negative broker retention meaning -1, unlimited);
* :class:`ServerLogSettings`, the intervals and per-pass limits of the LogManager.

Topic config names (``segment.bytes``) are accepted too and win over their broker names. Every
name is checked: an unknown one is an :class:`InvalidConfigError` naming it, as a typo in a
setting must not pass silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from .config import PRODUCER_ID_EXPIRATION_MS_DEFAULT, TOPIC_CONFIG_NAMES, LogConfig
from .descriptor_budget import DEFAULT_DESCRIPTORS_RESERVED
from .errors import InvalidConfigError
from .open_segments import DEFAULT_OPEN_SEGMENTS_MAX
from .throttler import UNLIMITED

__all__ = [
    "BROKER_TO_TOPIC_CONFIG",
    "SERVER_SETTING_NAMES",
    "ServerLogSettings",
    "broker_synonyms",
    "parse_server_defaults",
    "server_setting_values",
]

_INT64_MAX = 2**63 - 1
_MS_PER_MINUTE = 60_000
_MS_PER_HOUR = 3_600_000

# Broker name -> topic config name, for the names that map one to one (Kafka's
# ServerTopicConfigSynonyms). Names with a unit conversion or precedence are handled below.
BROKER_TO_TOPIC_CONFIG: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.retention.bytes": "retention.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    # Not a Kafka name: message.max.bytes under the log. prefix, for settings layers that only
    # pass log.* names (the server's TOML [log] table and STRATALOG_LOG_* variables).
    "log.message.max.bytes": "max.message.bytes",
    "log.preallocate": "preallocate",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
}

# Broker names feeding one topic config, highest precedence first, with their unit in ms.
_TIME_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", _MS_PER_MINUTE),
        ("log.retention.hours", _MS_PER_HOUR),
    ),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", _MS_PER_HOUR)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _MS_PER_HOUR)),
    # Kafka: log.flush.interval.ms, else log.flush.scheduler.interval.ms.
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
}


@dataclass(frozen=True)
class ServerLogSettings:
    """The LogManager's own settings (no topic counterpart), with their broker names.

    Intervals are Kafka's. The ``*_per_pass_max`` limits are stratalog's: they bound one
    :meth:`LogManager.run_maintenance` pass so that a backlog (a retention change on a topic
    with 100,000 segments) is worked off over several passes instead of one long stall.
    """

    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    flush_scheduler_interval_ms: int = 0  # log.flush.scheduler.interval.ms (0: every pass)
    flush_offset_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    flush_start_offset_checkpoint_interval_ms: int = 60_000  # log.flush.start.offset.checkpoint...
    # replica.high.watermark.checkpoint.interval.ms (issue 17: logs that track a high watermark)
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    recovery_threads_per_data_dir: int = 1  # num.recovery.threads.per.data.dir
    node_id: int = 1  # node.id, written to a new meta.properties
    retention_segments_per_pass_max: int = 1000  # log.retention.segments.per.pass.max
    deleted_dirs_per_pass_max: int = 100  # log.delete.dirs.per.pass.max
    topic_partitions_max: int = 10_000  # log.topic.partitions.max
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT  # producer.id.expiration.ms
    # producer.id.expiration.check.interval.ms
    producer_id_expiration_check_interval_ms: int = 600_000
    # stratalog's, for the file descriptors (descriptor_budget.py): inactive segments whose
    # files stay open (log.open.segments.max), and descriptors left to everything but the
    # segments (log.descriptors.reserved).
    open_segments_max: int = DEFAULT_OPEN_SEGMENTS_MAX
    descriptors_reserved: int = DEFAULT_DESCRIPTORS_RESERVED
    # The log cleaner (cleaner_manager.py), Kafka's names and defaults.
    cleaner_enable: bool = True  # log.cleaner.enable
    cleaner_threads: int = 1  # log.cleaner.threads
    cleaner_dedupe_buffer_size: int = 134_217_728  # log.cleaner.dedupe.buffer.size (all threads)
    cleaner_io_buffer_size: int = 524_288  # log.cleaner.io.buffer.size
    cleaner_io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    # log.cleaner.io.max.bytes.per.second: Kafka's Double.MAX_VALUE, no limit (throttler.py)
    cleaner_io_max_bytes_per_second: float = UNLIMITED
    cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms


# Broker name -> (field, minimum).
_SERVER_SETTINGS: dict[str, tuple[str, int]] = {
    "log.retention.check.interval.ms": ("retention_check_interval_ms", 1),
    "log.flush.scheduler.interval.ms": ("flush_scheduler_interval_ms", 0),
    "log.flush.offset.checkpoint.interval.ms": ("flush_offset_checkpoint_interval_ms", 0),
    "log.flush.start.offset.checkpoint.interval.ms": (
        "flush_start_offset_checkpoint_interval_ms", 0
    ),
    "replica.high.watermark.checkpoint.interval.ms": (
        "replica_high_watermark_checkpoint_interval_ms", 0
    ),
    "num.recovery.threads.per.data.dir": ("recovery_threads_per_data_dir", 1),
    "node.id": ("node_id", 0),
    "log.retention.segments.per.pass.max": ("retention_segments_per_pass_max", 1),
    "log.delete.dirs.per.pass.max": ("deleted_dirs_per_pass_max", 1),
    "log.topic.partitions.max": ("topic_partitions_max", 1),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", 1),
    "producer.id.expiration.check.interval.ms": ("producer_id_expiration_check_interval_ms", 1),
    "log.open.segments.max": ("open_segments_max", 0),
    "log.descriptors.reserved": ("descriptors_reserved", 0),
    "log.cleaner.threads": ("cleaner_threads", 1),
    "log.cleaner.dedupe.buffer.size": ("cleaner_dedupe_buffer_size", 1024),
    "log.cleaner.io.buffer.size": ("cleaner_io_buffer_size", 0),
    "log.cleaner.backoff.ms": ("cleaner_backoff_ms", 0),
}
# The settings that are not longs: broker name -> field.
_BOOL_SETTINGS: dict[str, str] = {"log.cleaner.enable": "cleaner_enable"}
# Broker name -> (field, minimum, maximum): Kafka's load factor is a double in (0, 1].
_DOUBLE_SETTINGS: dict[str, tuple[str, float, float]] = {
    "log.cleaner.io.buffer.load.factor": ("cleaner_io_buffer_load_factor", 0.0, 1.0),
    "log.cleaner.io.max.bytes.per.second": (
        "cleaner_io_max_bytes_per_second", 0.0, UNLIMITED
    ),
}
assert {field for field, _ in _SERVER_SETTINGS.values()} | set(_BOOL_SETTINGS.values()) | {
    field for field, _, _ in _DOUBLE_SETTINGS.values()
} == {f.name for f in fields(ServerLogSettings)}

SERVER_SETTING_NAMES: tuple[str, ...] = tuple(
    sorted(
        set(BROKER_TO_TOPIC_CONFIG)
        | {name for synonyms in _TIME_SYNONYMS.values() for name, _ in synonyms}
        | set(_SERVER_SETTINGS)
        | set(_BOOL_SETTINGS)
        | set(_DOUBLE_SETTINGS)
    )
)
"""Every broker-level name :func:`parse_server_defaults` understands (topic names aside)."""


def broker_synonyms(topic_name: str) -> tuple[str, ...]:
    """The broker names that give topic config ``topic_name`` its server default, highest
    precedence first, as Kafka's
    ``server-common/src/main/java/org/apache/kafka/server/config/ServerTopicConfigSynonyms.java``
    lists them (DescribeConfigs answers them as the config's synonyms). Empty for a topic config
    without one. Kafka's own names only: the ``log.message.max.bytes`` alias is ours."""
    if topic_name in _TIME_SYNONYMS:
        return tuple(name for name, _ in _TIME_SYNONYMS[topic_name])
    return tuple(broker for broker, topic in BROKER_TO_TOPIC_CONFIG.items()
                 if topic == topic_name and broker != "log.message.max.bytes")


def server_setting_values(settings: ServerLogSettings) -> dict[str, str]:
    """Every setting of ``settings`` by its broker name, as Kafka writes the value (integers in
    decimal, ``true``/``false``, doubles with a decimal point), sorted by name."""
    values: dict[str, str] = {}
    for name, (field_name, _) in _SERVER_SETTINGS.items():
        values[name] = str(getattr(settings, field_name))
    for name, field_name in _BOOL_SETTINGS.items():
        values[name] = "true" if getattr(settings, field_name) else "false"
    for name, (field_name, _, _) in _DOUBLE_SETTINGS.items():
        values[name] = repr(float(getattr(settings, field_name)))
    return dict(sorted(values.items()))


def _parse_long(name: str, raw: object) -> int:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: expected an integer")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip()
        digits = text[1:] if text[:1] in ("+", "-") else text
        if not digits.isascii() or not digits.isdigit():
            raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: not an integer")
        value = int(text)
    else:
        raise InvalidConfigError(
            f"invalid value {raw!r} for {name!r}: expected a string or an int"
        )
    if not -(2**63) <= value <= _INT64_MAX:
        raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: outside a Java long")
    return value


def _parse_bool(name: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: expected true or false")


def _parse_double(name: str, raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: expected a number")
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: not a number") from None
    if value != value:  # NaN
        raise InvalidConfigError(f"invalid value {raw!r} for {name!r}: not a number")
    return value


def parse_server_defaults(
    defaults: Mapping[str, str | int | bool] | None,
) -> tuple[LogConfig, ServerLogSettings]:
    """Split broker-level (and topic-level) names into topic defaults and server settings.

    Raises:
        InvalidConfigError: an unknown name, a value that does not parse, or a value out of
            Kafka's range (the message names the setting and the value).
    """
    defaults = dict(defaults or {})
    topic_values: dict[str, str | int | bool] = {}
    server_values: dict[str, int | float | bool] = {}
    for name, raw in defaults.items():
        if not isinstance(name, str):
            raise InvalidConfigError(f"setting names must be strings, got {name!r}")
        if name in BROKER_TO_TOPIC_CONFIG or name in TOPIC_CONFIG_NAMES:
            continue  # handled below, after the precedence rules
        if name in _SERVER_SETTINGS:
            field_name, minimum = _SERVER_SETTINGS[name]
            value = _parse_long(name, raw)
            if value < minimum:
                raise InvalidConfigError(
                    f"invalid value {raw!r} for {name!r}: value must be at least {minimum}"
                )
            server_values[field_name] = value
            continue
        if name in _BOOL_SETTINGS:
            server_values[_BOOL_SETTINGS[name]] = _parse_bool(name, raw)
            continue
        if name in _DOUBLE_SETTINGS:
            field_name, low, high = _DOUBLE_SETTINGS[name]
            number = _parse_double(name, raw)
            if not low < number <= high:
                raise InvalidConfigError(
                    f"invalid value {raw!r} for {name!r}: value must be above {low} and at "
                    f"most {high}"
                )
            server_values[field_name] = number
            continue
        if any(name == synonym for synonyms in _TIME_SYNONYMS.values() for synonym, _ in synonyms):
            continue
        if name in ("log.dir", "log.dirs"):
            raise InvalidConfigError(
                f"{name!r} is not a storage default: pass the log directories to LogManager.open"
            )
        raise InvalidConfigError(
            f"unknown storage setting {name!r} (value {raw!r}); known: "
            + ", ".join(SERVER_SETTING_NAMES)
            + ", and the topic configs "
            + ", ".join(TOPIC_CONFIG_NAMES)
        )
    for topic_name, synonyms in _TIME_SYNONYMS.items():
        for broker_name, unit_ms in synonyms:
            if broker_name in defaults:
                value = _parse_long(broker_name, defaults[broker_name])
                if topic_name == "retention.ms" and value < 0:
                    value = -1  # Kafka: a negative broker retention means unlimited
                elif value > _INT64_MAX // unit_ms:
                    value = _INT64_MAX
                else:
                    value *= unit_ms
                topic_values[topic_name] = value
                break
    for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
        if broker_name in defaults:
            raw = defaults[broker_name]
            if topic_name == "retention.bytes":
                value = _parse_long(broker_name, raw)
                raw = -1 if value < 0 else value
            topic_values[topic_name] = raw
    for name in TOPIC_CONFIG_NAMES:
        if name in defaults:
            topic_values[name] = defaults[name]
    return LogConfig.from_mapping(topic_values), ServerLogSettings(**server_values)
