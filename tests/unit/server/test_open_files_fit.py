"""server/open_files_fit.py: the default reservations fitted to a low RLIMIT_NOFILE, never an
explicit one (issue 25 item 19)."""

from __future__ import annotations

import pytest

from stratalog.server.open_files_fit import (
    PARTITIONS_KEPT_MIN,
    descriptor_budget_of,
    fit_to_open_files_limit,
)
from stratalog.server.settings import load_settings


def _reservations(settings) -> tuple[int, int, int, int]:
    budget = descriptor_budget_of(settings, 1 << 20)
    return (budget.reserved, settings.max_connections, settings.metrics_connections_max,
            settings.kafka_connections_max)


@pytest.mark.parametrize(("limit", "expected", "partitions"), [
    (1024, (128, 256, 32, 128), 80),
    (256, (64, 64, 8, 32), 14),
    (2048, (256, 512, 32, 256), 165),
    (4096, (512, 1024, 32, 1024), 250),  # room for 250 partitions: the defaults stay
    (65536, (512, 1024, 32, 1024), None),
])
def test_defaults_fit_the_limit(limit: int, expected, partitions) -> None:
    settings = load_settings(environ={})
    fit = fit_to_open_files_limit(settings, limit)
    assert _reservations(fit.settings) == expected
    budget = descriptor_budget_of(fit.settings, limit)
    assert budget.partitions_max >= min(PARTITIONS_KEPT_MIN, partitions or PARTITIONS_KEPT_MIN)
    if expected == (512, 1024, 32, 1024):
        assert fit.warning is None and fit.settings is settings
    else:
        assert fit.warning is not None and f"room for {partitions} partitions" in fit.warning
        assert budget.partitions_max == partitions


def test_explicit_values_are_kept_from_every_source(tmp_path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('[log]\n"descriptors.reserved" = 300\n')
    settings = load_settings(config_file=config, environ={"STRATALOG_MAX_CONNECTIONS": "700"},
                             overrides={"metrics_connections_max": "20",
                                        "kafka_connections_max": "3"})
    assert {"log.descriptors.reserved", "max_connections", "metrics_connections_max",
            "kafka_connections_max"} <= settings.explicit
    fit = fit_to_open_files_limit(settings, 1024)
    assert _reservations(fit.settings) == (300, 700, 20, 3)
    assert fit.warning is None  # nothing it may change


def test_only_the_unset_ones_are_lowered() -> None:
    settings = load_settings(environ={}, overrides={"max.connections": "100"})
    fit = fit_to_open_files_limit(settings, 1024)
    assert _reservations(fit.settings) == (128, 100, 32, 128)
    assert "max_connections" not in (fit.warning or "")


def test_metrics_off_counts_no_metrics_connections() -> None:
    settings = load_settings(environ={}, overrides={"metrics_port": "-1"})
    fit = fit_to_open_files_limit(settings, 1024)
    assert _reservations(fit.settings) == (128, 256, 32, 128)  # the cap unchanged: unused
    assert descriptor_budget_of(fit.settings, 1024).partitions_max == 85


def test_the_kafka_listener_off_counts_no_kafka_connections() -> None:
    settings = load_settings(environ={}, overrides={"kafka_listen": ""})
    fit = fit_to_open_files_limit(settings, 1024)
    assert _reservations(fit.settings) == (128, 256, 32, 1024)  # unused: left as it is
    assert descriptor_budget_of(fit.settings, 1024).partitions_max == 101


def test_an_explicit_kafka_cap_is_kept() -> None:
    settings = load_settings(environ={"STRATALOG_KAFKA_CONNECTIONS_MAX": "300"})
    fit = fit_to_open_files_limit(settings, 1024)
    assert fit.settings.kafka_connections_max == 300
