"""The command line as argparse reads it: targets, global options on either side of the
subcommand, repeated --partition, --format json and its --json alias, relative times."""

from __future__ import annotations

import argparse

import pytest

from stratalog.cli.connection import DEFAULT_TARGET, parse_target, parse_targets
from stratalog.cli.kafka_habits import kafka_topics_action
from stratalog.cli.main import build_parser
from stratalog.cli.timestamps import join_relative_times


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(join_relative_times(list(argv)))


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as caught:
        parse(*argv)
    assert caught.value.code == 2
    return capsys.readouterr().err


# ------------------------------------------------------------------------ --target


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("localhost", "localhost:50051"),        # was port 443: gRPC's default for a name
        ("db1.example.com", "db1.example.com:50051"),
        ("10.0.0.7:9000", "10.0.0.7:9000"),
        (" 127.0.0.1:50051 ", "127.0.0.1:50051"),
        ("[::1]", "[::1]:50051"),
        ("[::1]:7000", "[::1]:7000"),
        ("::1", "[::1]:50051"),
        ("dns:///broker:50051", "dns:///broker:50051"),
        ("unix:/tmp/stratalog.sock", "unix:/tmp/stratalog.sock"),
    ],
)
def test_a_target_without_a_port_gets_the_servers_default(text, target):
    assert parse_target(text) == target


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("http://localhost:50051", ["URL", "HOST:PORT", "--tls"]),
        ("https://db1:443", ["URL", "HOST:PORT", "--tls"]),
        ("grpc://db1", ["URL"]),
        ("localhost:0", ["1-65535"]),
        ("localhost:99999", ["1-65535"]),
        ("localhost:http", ["1-65535"]),
        (":50051", ["HOST"]),
        ("[::1", ["[IPV6]"]),
    ],
)
def test_a_url_or_a_bad_port_is_a_usage_error_saying_what_to_give(text, words):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_target(text)
    for word in words:
        assert word in str(caught.value)


def test_an_http_target_exits_2_not_3(capsys):
    err = usage_error(capsys, "topics", "list", "--target", "http://localhost:50051")
    assert "argument --target" in err and "HOST:PORT" in err


def test_target_and_security_options_go_before_or_after_the_subcommand(monkeypatch):
    monkeypatch.delenv("STRATALOG_TARGET", raising=False)
    before = parse("--target", "db1", "--tls", "topics", "list")
    after = parse("topics", "list", "--target", "db1", "--tls")
    assert before.target == after.target == "db1:50051"
    assert before.tls and after.tls
    assert parse("topics", "list").target == DEFAULT_TARGET
    # Given on both sides, the one after the subcommand (the nearer) wins.
    assert parse("--target", "a", "consume", "t", "--target", "b:1").target == "b:1"


def test_the_environments_target_is_checked_and_completed_too(monkeypatch):
    monkeypatch.setenv("STRATALOG_TARGET", "db2")
    assert parse("offsets", "t").target == "db2:50051"


def test_a_list_of_targets_is_completed_entry_by_entry(monkeypatch):
    monkeypatch.delenv("STRATALOG_TARGET", raising=False)
    assert parse_targets("db1, db2:7000,[::1]") == "db1:50051,db2:7000,[::1]:50051"
    assert parse_targets("db1,db1:50051") == "db1:50051"  # the same server once
    assert parse_targets("ipv4:10.0.0.1:1,10.0.0.2:1") == "ipv4:10.0.0.1:1,10.0.0.2:1"
    assert parse("topics", "list", "--target", "a,b:1").target == "a:50051,b:1"


def test_the_environments_list_is_checked_too(monkeypatch):
    monkeypatch.setenv("STRATALOG_TARGET", "db1,db2,db3")
    assert parse("offsets", "t").target == "db1:50051,db2:50051,db3:50051"


@pytest.mark.parametrize(("text", "words"), [
    ("db1,,db2", ["entry 2", "empty"]),
    ("db1,", ["entry 2", "empty"]),
    ("db1,http://db2", ["URL"]),
    ("db1,db2:0", ["1-65535"]),
])
def test_a_bad_list_is_a_usage_error_naming_the_entry(capsys, text, words):
    err = usage_error(capsys, "topics", "list", "--target", text)
    assert "argument --target" in err
    for word in words:
        assert word in err


def test_produce_takes_acks_and_refuses_others(capsys):
    assert parse("produce", "t").acks == "all"
    assert parse("produce", "t", "--acks", "1").acks == "1"
    assert "invalid choice" in usage_error(capsys, "produce", "t", "--acks", "2")


# ------------------------------------------------------------------------ --partition


def test_repeated_partitions_mean_these_partitions(monkeypatch):
    # Issue 15: offsets kept only the last --partition.
    assert parse("offsets", "t", "--partition", "0", "--partition", "2").partitions == [0, 2]
    assert parse("consume", "t", "--partition", "2", "--partition", "0").partitions == [2, 0]
    assert parse("offsets", "t").partitions is None


def test_a_partition_named_twice_or_negative_is_a_usage_error(capsys):
    assert "given twice" in usage_error(capsys, "consume", "t", "--partition", "1",
                                        "--partition", "1")
    assert ">= 0" in usage_error(capsys, "offsets", "t", "--partition", "-1")
    assert "partition number" in usage_error(capsys, "offsets", "t", "--partition", "x")


def test_produce_takes_one_partition_and_refuses_a_second(capsys):
    assert parse("produce", "t", "--partition", "3").partition == 3
    err = usage_error(capsys, "produce", "t", "--partition", "1", "--partition", "2")
    assert "--partition" in err and "given twice" in err


# ------------------------------------------------------------------------ --format json


@pytest.mark.parametrize(
    "command",
    [
        ("topics", "list"), ("topics", "describe", "t"), ("topics", "create", "t"),
        ("topics", "delete", "t"), ("topics", "alter", "t", "--set", "a=b"),
        ("offsets", "t"), ("consume", "t"), ("acls", "list"), ("whoami",),
        ("credentials", "list", "--file", "c.json"), ("bench",),
    ],
)
def test_every_command_with_json_output_takes_format_json_and_the_json_alias(command):
    assert parse(*command).format == "text"
    assert parse(*command, "--format", "json").format == "json"
    assert parse(*command, "--json").format == "json"  # deprecated, kept for old scripts


def test_describe_shows_overrides_unless_all():
    assert parse("topics", "describe", "t").all is False
    assert parse("topics", "describe", "t", "--all").all is True


# ------------------------------------------------------------------------ consume --reset


def test_consume_resets_nowhere_by_default_and_takes_kafkas_names(capsys):
    assert parse("consume", "t").reset == "none"
    assert parse("consume", "t", "--reset", "earliest").reset == "earliest"
    assert parse("consume", "t", "--reset", "latest").reset == "latest"
    usage_error(capsys, "consume", "t", "--reset", "smallest")


# ------------------------------------------------------------------------ relative times


@pytest.mark.parametrize("value", ["-1h", "-30m", "-2d", "-90s", "-500ms"])
def test_a_relative_time_after_a_timestamp_option_is_its_value_not_an_option(value):
    assert parse("consume", "t", "--from-timestamp", value).from_timestamp == value
    assert parse("offsets", "t", "--time", value).time == value


def test_joining_leaves_other_options_and_words_after_double_dash_alone():
    argv = ["consume", "t", "--from", "-1h", "--", "--time", "-1h"]
    assert join_relative_times(argv) == argv
    assert join_relative_times(["--time", "-1h", "x"]) == ["--time=-1h", "x"]
    assert join_relative_times(["--time"]) == ["--time"]


# ------------------------------------------------------------------------ Kafka and kcat habits


def test_bootstrap_server_is_target_before_and_after_the_subcommand(monkeypatch):
    monkeypatch.delenv("STRATALOG_TARGET", raising=False)
    assert parse("--bootstrap-server", "db1:9000", "topics", "list").target == "db1:9000"
    assert parse("consume", "t", "--bootstrap-server", "db1,db2").target == (
        "db1:50051,db2:50051")


def test_partition_lists_with_commas_and_repeats_keep_their_order():
    assert parse("consume", "t", "--partition", "2,0", "--partition", "1").partitions == [2, 0, 1]
    assert parse("offsets", "t", "--partition", "3").partitions == [3]


def test_produce_takes_one_partition_not_a_list(capsys):
    assert "expected a partition number, got '0,1'" in usage_error(
        capsys, "produce", "t", "--partition", "0,1")


def test_consume_aliases_collect_into_one_list_of_wheres():
    args = parse("consume", "t", "-o", "-10", "--offset", "e@5", "--from-beginning",
                 "--max-messages", "3")
    assert args.wheres == ["-10", "e@5", "earliest"]
    assert args.max_records == 3


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["topics", "--create", "--topic", "t", "--partitions", "3"],
         ["topics", "create", "--topic", "t", "--partitions", "3"]),
        (["--target", "db1", "topics", "--bootstrap-server", "db1", "--list"],
         ["--target", "db1", "topics", "list", "--bootstrap-server", "db1"]),
        (["topics", "--describe", "--topic", "t"], ["topics", "describe", "--topic", "t"]),
        # Already an action: alter's own --delete (a config to reset) is left alone.
        (["topics", "alter", "t", "--delete", "retention.ms"],
         ["topics", "alter", "t", "--delete", "retention.ms"]),
        # Two actions: argparse names the problem, nothing is guessed.
        (["topics", "--create", "--delete", "--topic", "t"],
         ["topics", "--create", "--delete", "--topic", "t"]),
        (["consume", "t", "--from", "5"], ["consume", "t", "--from", "5"]),
        (["--tls", "topics", "--list"], ["--tls", "topics", "list"]),
        # A topic named "topics" is not the command.
        (["consume", "topics", "--delete"], ["consume", "topics", "--delete"]),
        (["--target", "topics", "consume", "x", "--list"],
         ["--target", "topics", "consume", "x", "--list"]),
    ],
)
def test_kafka_topics_action_flags_become_the_action(argv, expected):
    assert kafka_topics_action(argv) == expected


def test_the_rewritten_topics_command_parses():
    args = parse(*kafka_topics_action(["topics", "--create", "--topic", "t", "--partitions", "3"]))
    assert (args.action, args.topic_option, args.partitions) == ("create", "t", 3)
