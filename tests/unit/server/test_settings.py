"""Server settings: defaults, TOML file < environment < flags, and clear errors."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from stratalog.server.settings import (
    SETTING_NAMES,
    Address,
    Settings,
    SettingsError,
    add_arguments,
    load_settings,
    parse_address,
    settings_from_args,
)

DOCS = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def _parse_flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_are_the_embedded_default() -> None:
    settings = load_settings(environ={})
    assert settings.listen == "127.0.0.1:50051"
    assert settings.listen_address == Address("127.0.0.1", 50051)
    assert settings.log_dirs == ("./data",)
    assert settings.log_defaults == {}
    assert settings == Settings()


def test_file_environment_and_flags_in_increasing_precedence(tmp_path: Path) -> None:
    config = tmp_path / "stratalog.toml"
    config.write_text(
        'listen = "127.0.0.1:1111"\n'
        "fetch_max_bytes_default = 1000\n"
        "subscribe_buffer_bytes = 2000\n"
        "io_threads = 3\n"
        "[log]\n"
        "segment.bytes = 1048576\n"
        "retention.ms = 1000\n"
        'cleanup.policy = ["delete", "compact"]\n'
        "preallocate = true\n"
    )
    environ = {
        "STRATALOG_FETCH_MAX_BYTES_DEFAULT": "3000",
        "STRATALOG_SUBSCRIBE_BUFFER_BYTES": "4000",
        "STRATALOG_LOG_RETENTION_MS": "2000",
        "STRATALOG_LOG_FLUSH_INTERVAL_MESSAGES": "5",
    }
    args = _parse_flags(
        "--config", str(config), "--subscribe-buffer-bytes", "5000",
        "--set", "log.flush.interval.messages=7",
    )
    settings = settings_from_args(args, environ=environ)
    assert settings.listen == "127.0.0.1:1111"  # file only
    assert settings.io_threads == 3  # file only
    assert settings.fetch_max_bytes_default == 3000  # environment over file
    assert settings.subscribe_buffer_bytes == 5000  # flag over environment over file
    assert settings.log_defaults == {
        "log.segment.bytes": "1048576",  # file
        "log.retention.ms": "2000",  # environment over file
        "log.flush.interval.messages": "7",  # --set over environment
        "log.cleanup.policy": "delete,compact",
        "log.preallocate": "true",
    }


def test_given_names_what_a_source_set_and_not_what_kept_its_default(tmp_path: Path) -> None:
    # A default may give way where a chosen value may not (app.py: the metrics port).
    config = tmp_path / "s.toml"
    config.write_text('metrics_port = 9464\n"node.id" = 2\n')
    assert not load_settings(environ={}).given("metrics_port")
    from_file = load_settings(config_file=config, environ={})
    assert from_file.given("metrics_port") and from_file.given("node_id")  # Kafka's name too
    assert not from_file.given("listen")
    assert load_settings(environ={"STRATALOG_METRICS_PORT": "9464"}).given("metrics_port")
    assert load_settings(environ={}, overrides={"metrics_port": "9464"}).given("metrics_port")
    # Built directly, every value counts as chosen.
    assert Settings().given("metrics_port")


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('log_dirs = ["/a", "/b"]\n')
    settings = load_settings(environ={"STRATALOG_CONFIG": str(config)})
    assert settings.log_dirs == ("/a", "/b")


def test_kafka_name_log_dirs_in_a_log_table(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[log]\ndirs = ["/x"]\nsegment.bytes = 20000000\n')
    settings = load_settings(config_file=config, environ={})
    assert settings.log_dirs == ("/x",)
    assert settings.log_defaults == {"log.segment.bytes": "20000000"}


def test_transaction_settings_by_our_names_and_kafkas(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        "transaction_partitions_max = 10\n"
        "[transaction]\n"
        "max.timeout.ms = 60000\n"
        "remove.expired.transaction.cleanup.interval.ms = 5000\n"
        "[transactional]\n"
        "id.expiration.ms = 70000\n"
    )
    environ = {
        "STRATALOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "250",
        "STRATALOG_TRANSACTION_MAX_TIMEOUT_MS": "30000",
    }
    args = _parse_flags("--config", str(config), "--set", "transaction.partitions.max=20",
                        "--transactional-id-expiration-ms", "80000")
    settings = settings_from_args(args, environ=environ)
    assert settings.transaction_max_timeout_ms == 30000  # environment over file
    assert settings.transaction_remove_expired_transaction_cleanup_interval_ms == 5000
    assert settings.transaction_abort_timed_out_transaction_cleanup_interval_ms == 250
    assert settings.transaction_partitions_max == 20  # --set over file
    assert settings.transactional_id_expiration_ms == 80000  # flag over file
    assert settings.log_defaults == {}


def test_producer_id_expiration_is_a_storage_default_under_kafkas_name(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[producer]\nid.expiration.check.interval.ms = 1000\n")
    settings = load_settings(
        config_file=config, environ={"STRATALOG_PRODUCER_ID_EXPIRATION_MS": "5000"}
    )
    assert settings.log_defaults == {
        "producer.id.expiration.ms": "5000",
        "producer.id.expiration.check.interval.ms": "1000",
    }
    args = _parse_flags("--set", "producer.id.expiration.ms=6000")
    assert settings_from_args(args, environ={}).log_defaults == {
        "producer.id.expiration.ms": "6000"}
    with pytest.raises(SettingsError, match=r"unknown setting 'producer\.linger\.ms'"):
        settings_from_args(_parse_flags("--set", "producer.linger.ms=1"), environ={})


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"STRATALOG_TRANSACTION_MAX_TIMEOUT_MS": "0"}, ["transaction_max_timeout_ms", ">= 1"]),
        ({"STRATALOG_TRANSACTION_PARTITIONS_MAX": "many"},
         ["transaction_partitions_max", "STRATALOG_TRANSACTION_PARTITIONS_MAX", "'many'"]),
    ],
)
def test_bad_transaction_settings_name_themselves(environ, words) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(environ=environ)
    for word in words:
        assert word in str(raised.value)


def test_log_dirs_comma_separated_from_flags_and_environment() -> None:
    settings = load_settings(environ={"STRATALOG_LOG_DIRS": "/d1, /d2,"})
    assert settings.log_dirs == ("/d1", "/d2")
    args = _parse_flags("--log-dirs", "/e1,/e2")
    assert settings_from_args(args, environ={}).log_dirs == ("/e1", "/e2")


def test_dedicated_flag_wins_over_set() -> None:
    args = _parse_flags("--set", "listen=127.0.0.1:1", "--listen", "127.0.0.1:2")
    assert settings_from_args(args, environ={}).listen == "127.0.0.1:2"


def test_unrelated_environment_variables_are_ignored() -> None:
    settings = load_settings(environ={"STRATALOG_CRASH_ITERATIONS": "50", "PATH": "/bin"})
    assert settings == Settings()


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"STRATALOG_MAX_REQUEST_BYTES": "lots"}, ["max_request_bytes",
                                                  "STRATALOG_MAX_REQUEST_BYTES", "'lots'"]),
        ({"STRATALOG_MAX_REQUEST_BYTES": "0"}, ["max_request_bytes", ">= 1", "0"]),
        ({"STRATALOG_LISTEN": "nowhere"}, ["listen", "HOST:PORT"]),
        ({"STRATALOG_LISTEN": "127.0.0.1:70000"}, ["listen", "0..65535"]),
        ({"STRATALOG_LISTEN": "::1:5"}, ["listen", "brackets"]),
        ({"STRATALOG_METRICS_PORT": "-2"}, ["metrics_port", ">= -1"]),
        ({"STRATALOG_METRICS_PORT": "65536"}, ["metrics_port", "65535"]),
        ({"STRATALOG_IO_THREADS_NICE": "-1"}, ["io_threads_nice", ">= 0"]),
        ({"STRATALOG_IO_THREADS_NICE": "20"}, ["io_threads_nice", "<= 19", "20"]),
        ({"STRATALOG_LOGGING_LEVEL": "LOUD"}, ["logging_level", "LOUD"]),
        ({"STRATALOG_LOG_DIRS": ","}, ["log_dirs"]),
    ],
)
def test_bad_values_name_the_setting(environ: dict[str, str], words: list[str]) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ=environ)
    for word in words:
        assert word in str(caught.value)


def test_unknown_name_in_file_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("max_request_byte = 5\n")
    with pytest.raises(SettingsError, match=r"unknown setting 'max_request_byte' \(did you mean "
                                            r"'max_request_bytes'\?\) from config file .*c\.toml"):
        load_settings(config_file=config, environ={})


def test_unknown_name_in_set_is_an_error() -> None:
    args = _parse_flags("--set", "fetch_bytes=5")
    with pytest.raises(SettingsError, match="unknown setting 'fetch_bytes'"):
        settings_from_args(args, environ={})


def test_malformed_set_is_an_error() -> None:
    with pytest.raises(SettingsError, match="NAME=VALUE"):
        settings_from_args(_parse_flags("--set", "novalue"), environ={})


def test_broken_and_missing_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("listen = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(config_file=broken, environ={})
    with pytest.raises(SettingsError, match="cannot read the config file"):
        load_settings(config_file=tmp_path / "missing.toml", environ={})


def test_wrong_types_in_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("io_threads = true\n")
    with pytest.raises(SettingsError, match=r"io_threads.*expected an integer"):
        load_settings(config_file=config, environ={})
    config.write_text("log_dirs = 5\n")
    with pytest.raises(SettingsError, match=r"log_dirs.*list of paths"):
        load_settings(config_file=config, environ={})
    config.write_text("[log]\nsegment.bytes = 1.5\n")
    with pytest.raises(SettingsError, match=r"log\.segment\.bytes.*unsupported value"):
        load_settings(config_file=config, environ={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:50051", Address("127.0.0.1", 50051)),
        ("0.0.0.0:0", Address("0.0.0.0", 0)),
        ("localhost:9", Address("localhost", 9)),
        ("[::1]:50051", Address("::1", 50051)),
    ],
)
def test_parse_address(text: str, expected: Address) -> None:
    assert parse_address(text) == expected
    assert parse_address(str(expected)) == expected


@pytest.mark.parametrize("text", ["", ":5", "host", "host:", "host:x", "[::1]5", "[zz]:5"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text)


def test_every_setting_is_documented_with_its_default() -> None:
    text = DOCS.read_text()
    defaults = Settings()
    for name in SETTING_NAMES:
        row = re.search(rf"^\| `{name}` \|(.*)$", text, re.MULTILINE)
        assert row is not None, f"docs/configuration.md has no row for {name}"
        default = getattr(defaults, name)
        if isinstance(default, bool):
            shown = "true" if default else "false"
        else:
            shown = ",".join(default) if isinstance(default, tuple) else str(default)
        assert f"`{shown}`" in row.group(1), f"{name}: default {shown} not in its docs row"
        assert f"STRATALOG_{name.upper()}" in row.group(1)
        assert f"--{name.replace('_', '-')}" in row.group(1)


# ---- per-client limits (server/client_limits.py)


def test_waiting_rpcs_must_stay_below_the_concurrent_rpc_cap() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(environ={"STRATALOG_WAITING_RPCS_MAX": "8192"})
    for word in ("waiting_rpcs_max", "(8192)", "max_concurrent_rpcs", "unary RPCs"):
        assert word in str(raised.value)
    # Raised together, they are fine.
    settings = load_settings(
        environ={"STRATALOG_WAITING_RPCS_MAX": "9000", "STRATALOG_MAX_CONCURRENT_RPCS": "10000"}
    )
    assert (settings.waiting_rpcs_max, settings.max_concurrent_rpcs) == (9000, 10000)


def test_connection_limits_by_kafkas_names(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[connections.max]\nidle.ms = 1000\n")
    settings = load_settings(config_file=config, environ={},
                             overrides={"max.connections": "10"})
    assert (settings.connections_max_idle_ms, settings.max_connections) == (1000, 10)
    with pytest.raises(SettingsError, match=r"waiting_rpcs_per_client_max.*>= 1"):
        load_settings(environ={"STRATALOG_WAITING_RPCS_PER_CLIENT_MAX": "0"})


@pytest.mark.parametrize(
    ("item", "suggested"),
    [
        ("log.segmnt.bytes=5", "log.segment.bytes"),
        ("log.retention.hour=1", "log.retention.hours"),
        ("max-request-bytes=5", "max_request_bytes"),
        ("log.dir=/x", "log.dirs"),
        ("transaction.max.timout.ms=5", "transaction.max.timeout.ms"),
    ],
)
def test_an_unknown_name_in_set_names_the_closest_setting(item: str, suggested: str) -> None:
    # Issue 15: an unknown log.* name passed the settings and failed later, in the LogManager,
    # as "cannot open the log directories" with a list of 60 names.
    name = item.partition("=")[0]
    with pytest.raises(SettingsError) as caught:
        settings_from_args(_parse_flags("--set", item), environ={})
    assert str(caught.value).startswith(
        f"unknown setting {name!r} (did you mean {suggested!r}?) from --set")
    assert "fetch_max_bytes_default" not in str(caught.value)  # no list of every name


def test_an_unknown_name_without_a_close_one_says_where_the_names_are() -> None:
    with pytest.raises(SettingsError, match=r"unknown setting 'zzz' from --set; every setting "
                                            r"is listed by `stratalog serve --help`"):
        settings_from_args(_parse_flags("--set", "zzz=1"), environ={})


def test_unknown_log_names_from_the_environment_and_the_file_are_refused_too(
    tmp_path: Path,
) -> None:
    with pytest.raises(SettingsError, match=r"unknown setting 'log\.segmnt\.bytes' \(did you"
                                            r" mean 'log\.segment\.bytes'\?\) from "
                                            r"STRATALOG_LOG_SEGMNT_BYTES"):
        load_settings(environ={"STRATALOG_LOG_SEGMNT_BYTES": "5"})
    config = tmp_path / "c.toml"
    config.write_text("[log]\nsegmnt.bytes = 5\n")
    with pytest.raises(SettingsError, match=r"did you mean 'log\.segment\.bytes'"):
        load_settings(config_file=config, environ={})


def test_log_values_are_checked_by_the_log_managers_parser_before_any_io() -> None:
    with pytest.raises(SettingsError, match=r"segment\.bytes.*at least 14"):
        settings_from_args(_parse_flags("--set", "log.segment.bytes=5"), environ={})
    assert settings_from_args(
        _parse_flags("--set", "log.segment.bytes=1048576"), environ={}
    ).log_defaults == {"log.segment.bytes": "1048576"}


# ---- the broker identity (issue 24; server/cluster/broker_identity.py)

_CLUSTER = {"STRATALOG_CLUSTER": "etcd://127.0.0.1:2379"}
_TLS = {"STRATALOG_TLS_CERT_FILE": "s.crt", "STRATALOG_TLS_KEY_FILE": "s.key"}


def test_broker_principals_are_a_semicolon_list_of_principals() -> None:
    settings = load_settings(environ={
        **_CLUSTER, **_TLS, "STRATALOG_TLS_CA_FILE": "ca.crt",
        "STRATALOG_TLS_CLIENT_AUTH": "required",
        "STRATALOG_BROKER_PRINCIPALS": "User:CN=broker-1,O=example; User:CN=broker-2,O=example",
    })
    assert settings.broker_principals == ("User:CN=broker-1,O=example",
                                          "User:CN=broker-2,O=example")
    with pytest.raises(SettingsError, match=r"'broker_principals': 'broker-1': a principal is"):
        load_settings(environ={"STRATALOG_BROKER_PRINCIPALS": "broker-1"})
    with pytest.raises(SettingsError, match=r"User:ANONYMOUS is anyone who brings no"):
        load_settings(environ={"STRATALOG_BROKER_PRINCIPALS": "User:ANONYMOUS"})


@pytest.mark.parametrize(("environ", "message"), [
    # A server must have something to prove it is one of them.
    ({**_CLUSTER, **_TLS, "STRATALOG_BROKER_PRINCIPALS": "User:broker"},
     r"'broker_principals' is set but this server has nothing to prove"),
    # Refusing anonymous callers without broker principals would refuse the followers.
    ({**_CLUSTER, "STRATALOG_AUTHENTICATION_ANONYMOUS": "refused"},
     r"cluster mode with authentication or ACLs needs 'broker_principals'"),
    ({**_CLUSTER, **_TLS, "STRATALOG_AUTHENTICATION_CREDENTIALS_FILE": "c.json"},
     r"cluster mode with authentication or ACLs needs 'broker_principals'"),
    # ACLs alone: the followers would arrive as User:ANONYMOUS and need CLUSTER_ACTION.
    ({**_CLUSTER, "STRATALOG_AUTHORIZER": "acl"},
     r"cluster mode with authentication or ACLs needs 'broker_principals'"),
    ({"STRATALOG_INTER_BROKER_USER": "broker"},
     r"'inter_broker_user' and 'inter_broker_password_file' go together"),
    ({**_TLS, "STRATALOG_INTER_BROKER_USER": "b", "STRATALOG_INTER_BROKER_PASSWORD_FILE": "p",
      "STRATALOG_INTER_BROKER_TOKEN_FILE": "t"},
     r"'inter_broker_user' and 'inter_broker_token_file' are two ways"),
    ({"STRATALOG_INTER_BROKER_TOKEN_FILE": "t"},
     r"without TLS would cross the network readable by anyone"),
    ({"STRATALOG_INTER_BROKER_TLS_CA_FILE": "ca.crt"},
     r"'inter_broker_tls_ca_file' needs TLS"),
])
def test_inter_broker_settings_that_cannot_work_are_refused(environ: dict[str, str],
                                                             message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(environ=environ)


def test_a_cluster_with_passwords_between_its_servers() -> None:
    settings = load_settings(environ={
        **_CLUSTER, **_TLS, "STRATALOG_AUTHENTICATION_CREDENTIALS_FILE": "c.json",
        "STRATALOG_BROKER_PRINCIPALS": "User:broker-1;User:broker-2",
        "STRATALOG_INTER_BROKER_USER": "broker-1",
        "STRATALOG_INTER_BROKER_PASSWORD_FILE": "broker-1.password",
    })
    assert (settings.inter_broker_user, settings.anonymous_allowed) == ("broker-1", False)
    # Without security at all, a cluster needs none of it (it trusts its network).
    assert load_settings(environ=_CLUSTER).broker_principals == ()


def test_the_help_of_every_flag_formats() -> None:
    """argparse formats each help text with %: a setting's doc with a % of its own (the group
    partition's ``hashCode % partitions``) made `stratalog serve --help` crash."""
    import argparse

    from stratalog.server.settings import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    assert "--kafka-listen" in text and "% this" in text
