"""What DescribeConfigs answers: every config of a topic or of this broker, with its value,
where the value comes from, and whether it may be changed.

Kafka's ``ConfigHelper.describeConfigs`` (``core/src/main/scala/kafka/server/ConfigHelper.scala``)
in the serving layer's terms, front-end neutral (the Kafka front end turns a
:class:`ConfigEntry` into a ``DescribeConfigsResponse`` entry field by field). Sources are
Kafka's ``DescribeConfigsResponse.ConfigSource`` values
(``clients/src/main/java/org/apache/kafka/common/requests/DescribeConfigsResponse.java``)::

    a topic's config      TOPIC_CONFIG          the topic overrides it
                          STATIC_BROKER_CONFIG  the server's settings set a broker synonym
                                                (``log.segment.bytes`` for ``segment.bytes``)
                          DEFAULT_CONFIG        Kafka's default
    a broker's config     STATIC_BROKER_CONFIG  set in the config file, environment or flags
                          DEFAULT_CONFIG        left at its default

``is_default`` is ``source == DEFAULT_CONFIG`` (Kafka's rule). A topic's configs are
alterable (not read-only); every broker config is read-only: stratalog has no dynamic broker
configs, its settings are changed in the config file (docs/configuration.md). A topic config's
type is Kafka's ``ConfigType`` of its kind (storage/config.py), as is the type of a broker name
behind one; any other broker setting's is UNKNOWN. Synonyms follow
Kafka's order: the topic's override, then each broker synonym that is set (with its value as
written in the settings), then Kafka's default. No value is sensitive (no setting here holds a
secret: passwords live in the credential file, docs/security.md); ``log.dirs`` is left out of
a broker's configs, as clients never learn the server's paths (docs/api.md).

Pure functions over immutable values; any thread.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stratalog.server.settings import KAFKA_SETTING_NAMES
from stratalog.server.storage.config import TOPIC_CONFIG_KINDS, TOPIC_CONFIG_NAMES, LogConfig
from stratalog.server.storage.log_defaults import broker_synonyms, server_setting_values

if TYPE_CHECKING:
    from stratalog.server.settings import Settings
    from stratalog.server.storage.log_defaults import ServerLogSettings
    from stratalog.server.storage.topic_description import TopicDescription

__all__ = [
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "describe_broker_configs",
    "describe_topic_configs",
]

#: Kafka's own defaults of the topic configs, which DEFAULT_CONFIG synonyms carry.
_KAFKA_DEFAULTS = LogConfig().to_mapping()
#: Kafka-named settings a client must not see (the server's paths).
_HIDDEN_SETTINGS = frozenset({"log.dirs"})


class ConfigType(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` (the values on the wire)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


#: A topic config's kind (storage/config.py) -> its Kafka type.
_TYPES = {"int": ConfigType.INT, "long": ConfigType.LONG, "double": ConfigType.DOUBLE,
          "bool": ConfigType.BOOLEAN, "list": ConfigType.LIST,
          "timestamp_type": ConfigType.STRING}


class ConfigSource(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` (the values on the wire); stratalog
    answers with three of them (module docstring)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """Another name (or level) that sets a config, with its value there."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs lists it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    type: ConfigType = ConfigType.UNKNOWN

    @property
    def is_default(self) -> bool:
        """Kafka's ``isDefault``: the value is the default, set nowhere."""
        return self.source == ConfigSource.DEFAULT_CONFIG


def describe_topic_configs(
    description: TopicDescription, log_defaults: Mapping[str, str]
) -> list[ConfigEntry]:
    """Every config of a topic, in :data:`TOPIC_CONFIG_NAMES`' order (Kafka's table), from its
    description (effective values and which ones it overrides) and the server's ``log.*``
    settings as written (``Settings.log_defaults``)."""
    overridden = frozenset(description.overridden_configs)
    entries = []
    for name in TOPIC_CONFIG_NAMES:
        value = description.configs.get(name)
        synonyms = []
        if name in overridden:
            synonyms.append(ConfigSynonym(name, value, ConfigSource.TOPIC_CONFIG))
        # The settings accept a topic config's own name as a server default too.
        for broker_name in (*broker_synonyms(name), name):
            if broker_name in log_defaults:
                synonyms.append(ConfigSynonym(broker_name, log_defaults[broker_name],
                                              ConfigSource.STATIC_BROKER_CONFIG))
        synonyms.append(ConfigSynonym(name, _KAFKA_DEFAULTS[name], ConfigSource.DEFAULT_CONFIG))
        entries.append(ConfigEntry(name, value, synonyms[0].source, read_only=False,
                                   synonyms=tuple(synonyms),
                                   type=_TYPES[TOPIC_CONFIG_KINDS[name]]))
    return entries


def describe_broker_configs(
    settings: Settings, server_defaults: LogConfig, server_log_settings: ServerLogSettings
) -> list[ConfigEntry]:
    """Every config of this broker, sorted by name, all read-only: the ``log.*`` names
    behind the topic configs' server defaults (``server_defaults``: the LogManager's), the
    LogManager's own settings (``server_log_settings``) and the settings that have a Kafka
    name (:data:`~stratalog.server.settings.KAFKA_SETTING_NAMES`)."""
    log_defaults = settings.log_defaults
    entries: dict[str, ConfigEntry] = {}
    defaults = server_defaults.to_mapping()
    for topic_name in TOPIC_CONFIG_NAMES:
        names = broker_synonyms(topic_name)
        if not names:
            continue
        synonyms = (
            *(ConfigSynonym(name, log_defaults[name], ConfigSource.STATIC_BROKER_CONFIG)
              for name in (*names, topic_name) if name in log_defaults),
            ConfigSynonym(names[0], _KAFKA_DEFAULTS[topic_name], ConfigSource.DEFAULT_CONFIG),
        )
        # The first (Kafka's primary) name carries the value in the topic config's unit.
        entries[names[0]] = ConfigEntry(names[0], defaults[topic_name], synonyms[0].source,
                                        read_only=True, synonyms=synonyms,
                                        type=_TYPES[TOPIC_CONFIG_KINDS[topic_name]])
    for name, field_name in KAFKA_SETTING_NAMES.items():
        if name in _HIDDEN_SETTINGS:
            continue
        source = (ConfigSource.STATIC_BROKER_CONFIG if settings.given(field_name)
                  else ConfigSource.DEFAULT_CONFIG)
        entries[name] = ConfigEntry(name, _kafka_value(getattr(settings, field_name)), source,
                                    read_only=True)
    for name, value in server_setting_values(server_log_settings).items():
        if name in entries:
            continue  # node.id: the server's setting, which the LogManager's copies
        source = (ConfigSource.STATIC_BROKER_CONFIG if name in log_defaults
                  else ConfigSource.DEFAULT_CONFIG)
        entries[name] = ConfigEntry(name, value, source, read_only=True)
    return [entries[name] for name in sorted(entries)]


def _kafka_value(value: object) -> str | None:
    """A setting's value as Kafka writes a config: booleans lower-case, lists joined."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, frozenset)):
        # Kafka's super.users is ';'-separated (a certificate's subject holds commas).
        return ";".join(str(item) for item in value)
    return str(value)
