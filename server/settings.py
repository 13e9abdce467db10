"""Server configuration: every limit a named setting, from a TOML file, the environment and flags.

A server setting comes from up to four places; a later one wins, setting by setting::

    the default below  <  TOML file  <  STRATALOG_* environment variables  <  command-line flags

The TOML file (``--config PATH`` or ``STRATALOG_CONFIG``) holds the settings by name at the top
level and the storage defaults in a ``[log]`` table, with Kafka's broker names (``log.*``), which
the server hands to the LogManager as they are::

    listen = "0.0.0.0:50051"
    log_dirs = ["/var/lib/stratalog"]
    fetch_max_bytes_default = 1048576

    [log]
    segment.bytes = 104857600        # = Kafka's log.segment.bytes
    retention.ms = 86400000

Environment variables are ``STRATALOG_`` + the setting name in capitals (``STRATALOG_LISTEN``,
``STRATALOG_LOG_DIRS`` as a comma-separated list); a storage default is ``STRATALOG_`` + its
Kafka name in capitals with dots as underscores (``STRATALOG_LOG_SEGMENT_BYTES`` is
``log.segment.bytes``; no Kafka ``log.*`` name holds an underscore, so the mapping is exact).
Two storage defaults have Kafka names outside ``log.*``, and are taken as they are:
``producer.id.expiration.ms`` and ``producer.id.expiration.check.interval.ms``
(``STRATALOG_PRODUCER_ID_EXPIRATION_MS``, or a ``[producer]`` table in the file).

The transaction coordinator's settings are server settings named after Kafka's broker configs
with dots as underscores (``transaction_max_timeout_ms`` is ``transaction.max.timeout.ms``);
Kafka's dotted names are accepted as keys too (a ``[transaction]`` table in the file, or
``--set transaction.max.timeout.ms=...``).
The authorization and quota settings (docs/security.md) take Kafka's names as keys too
(``super.users``, ``allow.everyone.if.no.acl.found``, ``quota.window.num``); ``super_users`` is
semicolon-separated in the environment and flags, as Kafka's (a certificate's subject holds
commas). Per-principal quotas are tables of the file only, never flattened (principal names hold
dots)::

    [quotas."User:alice"]
    producer_byte_rate = 1048576

Other ``STRATALOG_*`` variables are not settings and are ignored. Flags are ``--listen``,
``--log-dirs``, ``--max-request-bytes`` ... (one per setting, the name with dashes) and
``--set NAME=VALUE`` for any setting or ``log.*`` default.

Every value is checked here, where the message can name the setting and where it came from;
``log.*`` names and values are checked here too, before anything touches the disk, by the
LogManager's own parser (``parse_server_defaults``, the one owner of their meaning). An unknown
name is refused with the closest known one (``unknown setting 'log.segmnt.bytes' (did you mean
'log.segment.bytes'?)``). docs/configuration.md lists every setting with its default; a unit test
keeps the two in step.

This module reads the sources; the settings themselves (each field with its default, unit,
range and documentation, and the rules between them) are :class:`Settings` in
``settings_schema.py``, re-exported here with everything else: import from
:mod:`stratalog.server.settings`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stratalog.server.settings_schema import (
    _ANONYMOUS_MODES,  # noqa: F401 - importable from here as before the split
    _CLIENT_AUTH_MODES,  # noqa: F401
    _LOG_PREFIX,
    _NOT_SETTINGS,
    _STORAGE_NAMES_OUTSIDE_LOG,
    AUTHORIZERS,
    METRICS_AUTHENTICATION_MODES,
    NODE_ID_MAX,
    QUOTA_NAMES,
    SETTING_NAMES,
    Address,
    Settings,
    SettingsError,
    SettingsSources,
    parse_address,
)
from stratalog.server.storage.log_defaults import SERVER_SETTING_NAMES

__all__ = [
    "AUTHORIZERS",
    "CONFIG_ENV_VAR",
    "ENV_PREFIX",
    "KAFKA_SETTING_NAMES",
    "METRICS_AUTHENTICATION_MODES",
    "NODE_ID_MAX",
    "QUOTA_NAMES",
    "SETTING_NAMES",
    "Address",
    "Settings",
    "SettingsError",
    "SettingsSources",
    "add_arguments",
    "configure_logging",
    "describe",
    "load_settings",
    "parse_address",
    "reload_settings",
    "settings_from_args",
]

#: The environment variable naming the TOML file (``--config`` wins over it).
CONFIG_ENV_VAR = "STRATALOG_CONFIG"
#: Prefix of every environment variable read as a setting.
ENV_PREFIX = "STRATALOG_"
#: The settings that list principals: separated by ';' (an mTLS subject holds commas).
_PRINCIPAL_LISTS = frozenset({"super_users", "broker_principals"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
#: The TOML table of per-principal quotas; principal names hold dots and colons, so its keys
#: are never flattened into dotted setting names.
_QUOTAS_TABLE = "quotas"

_FIELDS = {f.name: f for f in dataclasses.fields(Settings) if f.name not in _NOT_SETTINGS}
#: The storage defaults a settings layer may hold: the LogManager's broker names under
#: ``log.`` and the two outside it.
_STORAGE_NAMES = frozenset(
    {name for name in SERVER_SETTING_NAMES if name.startswith(_LOG_PREFIX)}
    | _STORAGE_NAMES_OUTSIDE_LOG
)
# Kafka's name for a setting, accepted as a key wherever our name is.
_KAFKA_ALIASES = {
    "log.dirs": "log_dirs",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms":
        "transaction_remove_expired_transaction_cleanup_interval_ms",
    "transaction.partitions.max": "transaction_partitions_max",
    "transaction.state.log.num.partitions": "transaction_state_log_num_partitions",
    "transaction.state.log.replication.factor": "transaction_state_log_replication_factor",
    "transaction.state.log.min.isr": "transaction_state_log_min_isr",
    "super.users": "super_users",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
    "quota.window.num": "quota_window_num",
    "max.connections": "max_connections",
    "auto.create.topics.enable": "auto_create_topics_enable",
    "num.partitions": "num_partitions",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "connections.max.reauth.ms": "kafka_connections_max_reauth_ms",
    "max.incremental.fetch.session.cache.slots": "kafka_fetch_session_cache_slots",
    "node.id": "node_id",
    "cluster.session.timeout.ms": "cluster_session_timeout_ms",
    "default.replication.factor": "default_replication_factor",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "broker.rack": "broker_rack",
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
    "leader.imbalance.per.broker.percentage": "leader_imbalance_per_broker_percentage",
    "advertised.listeners": "advertised_listen",
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "replica.fetch.response.max.bytes": "replica_fetch_response_max_bytes",
    "replica.fetch.backoff.ms": "replica_fetch_backoff_ms",
    "follower.replication.throttled.rate": "replica_reassignment_throttled_rate",
    "request.timeout.ms": "request_timeout_ms",
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
    "offsets.topic.replication.factor": "offsets_topic_replication_factor",
    "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.max.size": "group_max_size",
}
assert all(setting in _FIELDS for setting in _KAFKA_ALIASES.values())
#: Kafka's broker config name -> the setting it names (read-only): what a Kafka client's
#: DescribeConfigs of this broker lists beside the ``log.*`` defaults.
KAFKA_SETTING_NAMES: Mapping[str, str] = MappingProxyType(_KAFKA_ALIASES)


# ------------------------------------------------------------------------ parsing one value


def _parse_value(name: str, raw: object, source: str) -> Any:
    """Turn a raw value from ``source`` into the type of setting ``name``."""
    f = _FIELDS[name]
    default = f.default
    where = f"setting {name!r} from {source}"
    if isinstance(default, tuple):
        if isinstance(raw, str):
            # Principals may hold commas (an mTLS subject): Kafka separates them with ';'.
            separator = ";" if name in _PRINCIPAL_LISTS else ","
            items = [part.strip() for part in raw.split(separator)]
        elif isinstance(raw, list | tuple) and all(isinstance(p, str) for p in raw):
            items = [part.strip() for part in raw]
        else:
            kind = "principals" if name in _PRINCIPAL_LISTS else "paths"
            raise SettingsError(f"{where}: expected a list of {kind}, got {raw!r}")
        return tuple(item for item in items if item)
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise SettingsError(f"{where}: expected true or false, got {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, bool):
            raise SettingsError(f"{where}: expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                raise SettingsError(f"{where}: expected an integer, got {raw!r}") from None
        raise SettingsError(f"{where}: expected an integer, got {raw!r}")
    if not isinstance(raw, str):
        raise SettingsError(f"{where}: expected a string, got {raw!r}")
    return raw.strip()


def _log_value(name: str, raw: object, source: str) -> str:
    """A ``log.*`` value as the string the LogManager parses (Kafka's config syntax)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | str):
        return str(raw).strip()
    if isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        return ",".join(raw)  # cleanup.policy = ["delete", "compact"]
    raise SettingsError(f"storage default {name!r} from {source}: unsupported value {raw!r}")


# ------------------------------------------------------------------------ the sources


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables to dotted keys: ``[log] segment.bytes = 1`` -> ``log.segment.bytes``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _from_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise SettingsError(f"cannot read the config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    quotas = document.pop(_QUOTAS_TABLE, {})
    if not isinstance(quotas, dict):
        raise SettingsError(f"config file {path}: {_QUOTAS_TABLE} must be a table of"
                            ' principals, e.g. [quotas."User:alice"]')
    values = _flatten(document)
    for name in values:
        if _canonical(name) is None:
            raise _unknown(name, f"config file {path}")
    if quotas:
        values[_QUOTAS_TABLE] = quotas  # kept whole: principal names hold dots
    return values


def _canonical(name: str) -> str | None:
    """The setting or ``log.*`` name a key stands for, or None if it is neither."""
    name = _KAFKA_ALIASES.get(name, name)
    if name in _FIELDS or name in _STORAGE_NAMES:
        return name
    return None


def _unknown(name: str, source: str) -> SettingsError:
    """``unknown setting 'x' (did you mean 'y'?)``: the closest known name, not all 80."""
    candidates = [*SETTING_NAMES, *_KAFKA_ALIASES, *_STORAGE_NAMES]
    close = difflib.get_close_matches(name, candidates, n=1)
    # A flag's name with dashes (--max-request-bytes given to --set) is a setting's too.
    if not close:
        close = difflib.get_close_matches(name.replace("-", "_"), candidates, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SettingsError(
        f"unknown setting {name!r}{hint} from {source}; every setting is listed by "
        "`stratalog serve --help` and in docs/configuration.md"
    )


def _from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for variable, raw in environ.items():
        if not variable.startswith(ENV_PREFIX) or variable == CONFIG_ENV_VAR:
            continue
        suffix = variable[len(ENV_PREFIX):].lower()
        if suffix in _FIELDS:
            values[suffix] = raw
        elif suffix.startswith("log_") or suffix.replace("_", ".") in _STORAGE_NAMES_OUTSIDE_LOG:
            values[suffix.replace("_", ".")] = raw
        # Anything else is some other tool's STRATALOG_ variable, not a setting.
    return values


def reload_settings(settings: Settings) -> Settings:
    """``settings`` read again from the same file, environment and flags (SIGHUP).

    Raises:
        SettingsError: the file no longer reads or holds a bad value (the caller keeps the
            settings it has).
    """
    sources = settings.sources or SettingsSources(None, {}, {})
    return load_settings(
        config_file=sources.config_file, environ=sources.environ, overrides=sources.overrides
    )


def load_settings(
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Build the effective :class:`Settings`: defaults < file < environment < ``overrides``.

    ``config_file`` defaults to ``$STRATALOG_CONFIG`` when set (no file otherwise);
    ``environ`` to ``os.environ``; ``overrides`` are the flags, by setting name (or ``log.*``
    name), values as typed or as strings.

    Raises:
        SettingsError: an unreadable or invalid file, an unknown name in the file or the
            overrides, a value that does not parse or is out of range; the message names the
            setting and its source (file path, environment variable or flag).
    """
    env = os.environ if environ is None else environ
    if config_file is None and env.get(CONFIG_ENV_VAR):
        config_file = env[CONFIG_ENV_VAR]
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if config_file is not None:
        layers.append((f"config file {config_file}", _from_file(Path(config_file))))
    layers.append(("environment", _from_environment(env)))
    if overrides:
        layers.append(("flags", dict(overrides)))

    values: dict[str, Any] = {}
    log_defaults: dict[str, str] = {}
    quota_overrides: dict[str, Any] = {}
    for source_name, layer in layers:
        for key, raw in layer.items():
            if key == _QUOTAS_TABLE and source_name.startswith("config file"):
                quota_overrides = raw
                continue
            name = _canonical(key)
            if source_name == "environment":
                source = ENV_PREFIX + key.replace(".", "_").upper()
            elif source_name == "flags":
                source = f"flag for {key!r}"
            else:
                source = source_name
            if name is None:
                raise _unknown(key, "--set" if source_name == "flags" else source)
            if name in _FIELDS:
                values[name] = _parse_value(name, raw, source)
            else:
                log_defaults[name] = _log_value(name, raw, source)
    sources = SettingsSources(
        None if config_file is None else str(config_file),
        {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)},
        dict(overrides or {}),
    )
    try:
        return Settings(
            **values, log_defaults=log_defaults, quota_overrides=quota_overrides,
            sources=sources, explicit=frozenset(values) | frozenset(log_defaults),
        )
    except SettingsError as exc:
        sources = ", ".join(source for source, _ in layers)
        raise SettingsError(f"{exc} (sources: defaults, {sources})") from None


# ------------------------------------------------------------------------ flags


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# Second spellings of a few flags, the ones people type from habit (issue 25).
_FLAG_ALIASES = {"logging_level": ("--log-level",)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config``, one flag per setting and ``--set NAME=VALUE`` to ``parser``.

    Flags default to None (= not given), so that only flags on the command line override the
    file and the environment.
    """
    parser.add_argument(
        "--config", metavar="PATH", default=None,
        help=f"TOML configuration file (default: ${CONFIG_ENV_VAR}, else none)",
    )
    for name in SETTING_NAMES:
        f = _FIELDS[name]
        default = f.default
        if name == "log_dirs":
            help_text = f"{f.metadata['doc']}; comma-separated (default: ./data)".replace("%", "%%")
            parser.add_argument(_flag(name), metavar="PATH[,PATH]", default=None, help=help_text)
            continue
        if isinstance(default, bool):
            metavar = "true|false"
        elif isinstance(default, int):
            metavar = "N"
        else:
            metavar = "HOST:PORT" if name == "listen" else "VALUE"
        parser.add_argument(
            _flag(name), *_FLAG_ALIASES.get(name, ()), metavar=metavar, default=None,
            # argparse formats help with %: a doc's own % (a modulo) must be escaped.
            help=f"{f.metadata['doc']} (default: {default})".replace("%", "%%"),
        )
    parser.add_argument(
        "--set", metavar="NAME=VALUE", action="append", default=[], dest="set_values",
        help="any setting or log.* storage default, e.g. --set log.segment.bytes=1048576;"
             " repeatable",
    )
    parser.add_argument(
        "--print-settings", action="store_true",
        help="print every effective setting (name = value, the given ones marked) and exit"
             " without starting the server",
    )


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Settings:
    """The :class:`Settings` for parsed flags (see :func:`add_arguments`)."""
    overrides: dict[str, object] = {}
    for item in args.set_values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"--set {item!r}: expected NAME=VALUE")
        overrides[name.strip()] = value
    # Dedicated flags win over --set for the same setting.
    for name in SETTING_NAMES:
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    return load_settings(config_file=args.config, environ=environ, overrides=overrides)


def configure_logging(settings: Settings) -> None:
    """Send the server's log to stderr at ``settings.logging_level`` (once per process)."""
    logging.basicConfig(
        level=settings.logging_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def describe(settings: Settings) -> Sequence[str]:
    """``name = value`` lines of the effective settings, for the startup log (at DEBUG) and
    ``--print-settings``; a value that a file, the environment or a flag gave is marked
    ``(given)``, the others are defaults."""
    return [
        f"{name} = {value!r}{'  (given)' if name in settings.explicit else ''}"
        for name, value in settings.as_mapping().items()
    ]
