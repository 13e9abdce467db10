"""LogConfig: Kafka's topic config names, defaults (docs/kafka-behaviours.md#configuration), ranges
and derived values."""

from __future__ import annotations

import dataclasses
import random

import pytest

from stratalog.records.batch import TimestampType
from stratalog.server.storage.config import TOPIC_CONFIG_NAMES, LogConfig
from stratalog.server.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1

# Kafka's table (docs/kafka-behaviours.md#configuration) (trunk snapshot), as Kafka's to-string
# forms.
KAFKA_DEFAULTS = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.jitter.ms": "0",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.difference.max.ms": str(LONG_MAX),
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.after.max.ms": str(LONG_MAX),
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(LONG_MAX),
    "flush.ms": str(LONG_MAX),
    "cleanup.policy": "delete",
    "max.message.bytes": "1048588",
    "preallocate": "false",
    "unclean.leader.election.enable": "false",
    "max.compaction.lag.ms": str(LONG_MAX),
    "min.compaction.lag.ms": "0",
    "min.cleanable.dirty.ratio": "0.5",
    "delete.retention.ms": "86400000",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "min.insync.replicas": "1",
}


def test_defaults_are_the_reference_table() -> None:
    assert LogConfig().to_mapping() == KAFKA_DEFAULTS


def test_topic_config_names_cover_every_field() -> None:
    assert set(TOPIC_CONFIG_NAMES) == set(KAFKA_DEFAULTS)
    assert len(TOPIC_CONFIG_NAMES) == len(dataclasses.fields(LogConfig))


def test_from_mapping_parses_kafka_strings() -> None:
    config = LogConfig.from_mapping(
        {
            "segment.bytes": " 1048576 ",
            "segment.ms": "3600000",
            "index.interval.bytes": "0",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact, delete",
            "preallocate": "TRUE",
            "retention.ms": "-1",
            "retention.bytes": "-5",
        }
    )
    assert config.segment_bytes == 1048576
    assert config.segment_ms == 3600000
    assert config.index_interval_bytes == 0
    assert config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    assert config.cleanup_policy == ("compact", "delete")
    assert config.preallocate is True
    assert config.retention_ms == -1
    assert config.retention_bytes == -5  # retention.bytes has no validator in Kafka


def test_from_mapping_accepts_typed_values() -> None:
    config = LogConfig.from_mapping({"segment.bytes": 4096, "preallocate": True})
    assert config.segment_bytes == 4096
    assert config.preallocate is True


def test_from_mapping_overrides_given_defaults_only_where_named() -> None:
    server_defaults = LogConfig(segment_bytes=5000, retention_ms=1000)
    config = LogConfig.from_mapping({"retention.ms": "2000"}, defaults=server_defaults)
    assert config.segment_bytes == 5000
    assert config.retention_ms == 2000
    assert LogConfig.from_mapping({}, defaults=server_defaults) is server_defaults


def test_to_mapping_round_trips() -> None:
    config = LogConfig(
        segment_bytes=1000,
        message_timestamp_type=TimestampType.LOG_APPEND_TIME,
        cleanup_policy=("compact",),
        preallocate=True,
        flush_messages=10,
    )
    assert LogConfig.from_mapping(config.to_mapping()) == config


def test_unknown_key_is_rejected_naming_it() -> None:
    with pytest.raises(InvalidConfigError, match=r"'segment\.size'.*'7'"):
        LogConfig.from_mapping({"segment.size": "7"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment.bytes", "13"),  # atLeast(14)
        ("segment.ms", "0"),  # atLeast(1)
        ("segment.jitter.ms", "-1"),
        ("segment.index.bytes", "3"),  # atLeast(4)
        ("index.interval.bytes", "-1"),
        ("message.timestamp.before.max.ms", "-1"),
        ("message.timestamp.after.max.ms", "-1"),
        ("message.timestamp.difference.max.ms", "-1"),
        ("retention.ms", "-2"),  # atLeast(-1)
        ("file.delete.delay.ms", "-1"),
        ("flush.messages", "0"),  # atLeast(1)
        ("flush.ms", "-1"),
        ("max.message.bytes", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("local.retention.ms", "-3"),
        ("local.retention.bytes", "-3"),
    ],
)
def test_values_below_kafka_minimum_are_rejected(name: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_mapping({name: value})
    assert name in str(raised.value)
    assert value in str(raised.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment.bytes", "2147483648"),  # a Java int
        ("max.message.bytes", 2**31),
        ("segment.ms", str(2**63)),  # a Java long
        ("segment.bytes", "1.5"),
        ("segment.bytes", "1e3"),
        ("segment.bytes", ""),
        ("segment.bytes", "0x10"),
        ("segment.bytes", True),
        ("segment.bytes", 1.5),
        ("preallocate", "yes"),
        ("preallocate", 1),
        ("message.timestamp.type", "createtime"),
        ("message.timestamp.type", 0),
        ("cleanup.policy", "delete,purge"),
        ("cleanup.policy", 1),
    ],
)
def test_values_that_do_not_parse_are_rejected(name: str, value: object) -> None:
    with pytest.raises(InvalidConfigError, match=name.replace(".", r"\.")):
        LogConfig.from_mapping({name: value})  # type: ignore[dict-item]


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        LogConfig(segment_bytes=10)
    with pytest.raises(InvalidConfigError, match=r"cleanup\.policy"):
        LogConfig(cleanup_policy=("purge",))
    # A list policy is normalised to a tuple, so the config stays hashable and frozen.
    assert LogConfig(cleanup_policy=["compact"]).cleanup_policy == ("compact",)  # type: ignore[arg-type]


def test_empty_cleanup_policy_parses_as_no_policy() -> None:
    config = LogConfig.from_mapping({"cleanup.policy": ""})
    assert config.cleanup_policy == ()
    assert not config.is_delete
    assert not config.is_compacted


def test_random_segment_jitter() -> None:
    assert LogConfig().random_segment_jitter_ms() == 0
    config = LogConfig(segment_ms=100, segment_jitter_ms=1000)
    draws = {config.random_segment_jitter_ms(random.Random(seed)) for seed in range(200)}
    # Bounded by min(segment.jitter.ms, segment.ms), and actually random.
    assert min(draws) >= 0
    assert max(draws) < 100
    assert len(draws) > 50
    assert config.random_segment_jitter_ms(random.Random(7)) == config.random_segment_jitter_ms(
        random.Random(7)
    )


def test_max_segment_ms_is_capped_by_compaction_lag_on_compacted_topics() -> None:
    assert LogConfig(segment_ms=1000, max_compaction_lag_ms=10).max_segment_ms == 1000
    compacted = LogConfig(segment_ms=1000, max_compaction_lag_ms=10, cleanup_policy=("compact",))
    assert compacted.max_segment_ms == 10
    lagging = LogConfig(segment_ms=10, max_compaction_lag_ms=1000, cleanup_policy=("compact",))
    assert lagging.max_segment_ms == 10


def test_init_file_size() -> None:
    assert LogConfig(segment_bytes=5000).init_file_size == 0
    assert LogConfig(segment_bytes=5000, preallocate=True).init_file_size == 5000


def test_timestamp_windows_fall_back_to_the_deprecated_difference() -> None:
    config = LogConfig(message_timestamp_difference_max_ms=500)
    assert config.effective_timestamp_before_max_ms == 500
    assert config.effective_timestamp_after_max_ms == 500
    config = LogConfig(
        message_timestamp_difference_max_ms=500,
        message_timestamp_before_max_ms=10,
        message_timestamp_after_max_ms=20,
    )
    assert config.effective_timestamp_before_max_ms == 10
    assert config.effective_timestamp_after_max_ms == 20


def test_config_is_frozen_and_hashable() -> None:
    config = LogConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.segment_bytes = 5  # type: ignore[misc]
    assert hash(config) == hash(LogConfig())


def test_min_cleanable_dirty_ratio_is_a_double_between_0_and_1() -> None:
    ratio = LogConfig.from_mapping({"min.cleanable.dirty.ratio": " 0.25 "})
    assert ratio.min_cleanable_dirty_ratio == 0.25
    assert LogConfig.from_mapping({"min.cleanable.dirty.ratio": 1}).min_cleanable_dirty_ratio == 1.0
    for bad in ("1.5", "-0.1", "nan", "half", True):
        with pytest.raises(InvalidConfigError, match=r"min\.cleanable\.dirty\.ratio"):
            LogConfig.from_mapping({"min.cleanable.dirty.ratio": bad})


def test_cleaner_lag_and_retention_configs_have_kafka_ranges() -> None:
    config = LogConfig.from_mapping({"min.compaction.lag.ms": "5", "delete.retention.ms": "0"})
    assert (config.min_compaction_lag_ms, config.delete_retention_ms) == (5, 0)
    for name in ("min.compaction.lag.ms", "delete.retention.ms"):
        with pytest.raises(InvalidConfigError, match=name):
            LogConfig.from_mapping({name: "-1"})
