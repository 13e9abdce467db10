"""Fitting the default descriptor reservations to a low open files limit, at start.

The server takes four reservations out of ``RLIMIT_NOFILE`` before the storage gets its share
(server/storage/descriptor_budget.py): ``log.descriptors.reserved`` (512), ``max_connections``
(1,024), ``metrics_connections_max`` (32) and ``kafka_connections_max`` (1,024, with the Kafka
listener on), 2,592 descriptors before the first partition.
Many machines, containers and CI runners have a hard limit of 1,024 (or 256): with the defaults,
such a server would refuse to start with no partition at all. Kafka has no such reservation
(it lets a broker run out of descriptors at run time); stratalog keeps it, and sizes its
defaults to the limit instead::

    the reservations leave the storage room for >= 64 partitions  ->  kept as they are
    otherwise, each one not set explicitly  ->  min(its value, max(floor, limit / share))

        log.descriptors.reserved    limit / 8, at least 64   (1,024 -> 128;  256 -> 64)
        max_connections             limit / 4, at least 16   (1,024 -> 256;  256 -> 64)
        metrics_connections_max     limit / 32, at least 4   (1,024 -> 32;   256 -> 8)
        kafka_connections_max       limit / 8, at least 16   (1,024 -> 128;  256 -> 32)

so that a limit of 1,024 leaves the storage room for 80 partitions, 256 for 14 and 2,048 for
165; 4,096 keeps the defaults (room for 250). A value the user set (a file, the environment, a flag, ``--set``) is never
changed: if it does not fit, the start fails naming it (``DescriptorBudget.check_startup``).
Every change is logged as one warning, with the number of partitions the limit then allows.

Pure functions over settings; no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stratalog.server.settings import Settings
from stratalog.server.storage.descriptor_budget import DescriptorBudget
from stratalog.server.storage.log_defaults import parse_server_defaults

__all__ = ["OpenFilesFit", "connections_reserved", "descriptor_budget_of",
           "fit_to_open_files_limit"]

#: The ``log.*`` name of the storage's reserve (server/storage/log_defaults.py).
RESERVED_NAME = "log.descriptors.reserved"
#: The reservations are kept as they are while they leave the storage room for this many
#: partitions (6 descriptors each); below it the ones not set explicitly are lowered.
PARTITIONS_KEPT_MIN = 64
# (divisor of the limit, floor) of each reservation the start may lower.
_RESERVED_SHARE = (8, 64)
_CONNECTIONS_SHARE = (4, 16)
_METRICS_CONNECTIONS_SHARE = (32, 4)
_KAFKA_CONNECTIONS_SHARE = (8, 16)


@dataclass(frozen=True)
class OpenFilesFit:
    """The settings to serve with, and the warning to log when they differ from the given
    ones (None when nothing changed)."""

    settings: Settings
    warning: str | None


def connections_reserved(settings: Settings) -> int:
    """Descriptors the server's connections may hold at once, which the storage's share of
    ``RLIMIT_NOFILE`` leaves out: one per gRPC connection (``max_connections``), per metrics
    connection (``metrics_connections_max``, when the endpoint is on) and per Kafka connection
    (``kafka_connections_max``, when the Kafka listener is on)."""
    metrics = settings.metrics_connections_max if settings.metrics_port >= 0 else 0
    kafka = settings.kafka_connections_max if settings.kafka_listen else 0
    return settings.max_connections + metrics + kafka


def descriptor_budget_of(settings: Settings, limit: int) -> DescriptorBudget:
    """The storage's share of ``limit`` with these settings (as the LogManager computes it)."""
    return DescriptorBudget(
        limit,
        reserved=_reserved(settings),
        open_segments_max=parse_server_defaults(settings.log_defaults)[1].open_segments_max,
        connections=connections_reserved(settings),
    )


def fit_to_open_files_limit(settings: Settings, limit: int) -> OpenFilesFit:
    """``settings`` with the reservations the user did not set lowered to fit ``limit`` (the
    soft ``RLIMIT_NOFILE`` after the server raised it), when at their values they would leave
    the storage room for fewer than :data:`PARTITIONS_KEPT_MIN` partitions; unchanged
    otherwise."""
    metrics_on = settings.metrics_port >= 0
    kafka_on = bool(settings.kafka_listen)
    reserved = _reserved(settings)
    before = reserved + connections_reserved(settings)
    if descriptor_budget_of(settings, limit).partitions_max >= PARTITIONS_KEPT_MIN:
        return OpenFilesFit(settings, None)
    explicit = settings.explicit
    new_reserved = reserved if RESERVED_NAME in explicit else _share(reserved, limit,
                                                                    *_RESERVED_SHARE)
    new_connections = (settings.max_connections if "max_connections" in explicit
                       else _share(settings.max_connections, limit, *_CONNECTIONS_SHARE))
    new_metrics = (settings.metrics_connections_max
                   if "metrics_connections_max" in explicit or not metrics_on
                   else _share(settings.metrics_connections_max, limit,
                               *_METRICS_CONNECTIONS_SHARE))
    new_kafka = (settings.kafka_connections_max
                 if "kafka_connections_max" in explicit or not kafka_on
                 else _share(settings.kafka_connections_max, limit, *_KAFKA_CONNECTIONS_SHARE))
    changes = [
        (name, old, new) for name, old, new in (
            (RESERVED_NAME, reserved, new_reserved),
            ("max_connections", settings.max_connections, new_connections),
            ("metrics_connections_max", settings.metrics_connections_max, new_metrics),
            ("kafka_connections_max", settings.kafka_connections_max, new_kafka),
        ) if old != new
    ]
    if not changes:
        return OpenFilesFit(settings, None)
    log_defaults = dict(settings.log_defaults)
    if new_reserved != reserved:
        log_defaults[RESERVED_NAME] = str(new_reserved)
    fitted = dataclasses.replace(
        settings, max_connections=new_connections, metrics_connections_max=new_metrics,
        kafka_connections_max=new_kafka, log_defaults=log_defaults,
    )
    partitions = descriptor_budget_of(fitted, limit).partitions_max
    lowered = ", ".join(f"{name} {old:,} -> {new:,}" for name, old, new in changes)
    warning = (
        f"the open files limit RLIMIT_NOFILE is {limit:,} (the hard limit bounds it) and the "
        f"reservations (connections and log.descriptors.reserved) would take {before:,} of "
        f"it: starting with {lowered}; the "
        f"limit now leaves room for {partitions:,} partitions. To keep the defaults raise the "
        "hard limit (ulimit -Hn; docker run --ulimit nofile=N:N; systemd LimitNOFILE=N); "
        "values set explicitly are never lowered (docs/configuration.md, "
        "log.descriptors.reserved)"
    )
    return OpenFilesFit(fitted, warning)


def _reserved(settings: Settings) -> int:
    return parse_server_defaults(settings.log_defaults)[1].descriptors_reserved


def _share(default: int, limit: int, divisor: int, floor: int) -> int:
    return min(default, max(floor, limit // divisor))
