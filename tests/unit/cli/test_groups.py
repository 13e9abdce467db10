"""The CLI of consumer groups without a server: ``consume --group``'s and ``groups``' arguments,
the plan of ``reset-offsets`` (cli/reset_plan.py) as a table, ``describe``'s rows and table;
refusals run the whole command (``main``) in-process, before any request."""

from __future__ import annotations

import argparse

import pytest

from stratalog.cli.consume import group_start, group_subscription
from stratalog.cli.groups import (
    DESCRIBE_COLUMNS,
    DescribedPartition,
    describe_rows,
    describe_table,
    topic_and_partitions,
)
from stratalog.cli.kafka_habits import kafka_topics_action
from stratalog.cli.main import build_parser, main
from stratalog.cli.reset_plan import (
    PartitionOffsets,
    PlannedReset,
    ResetPlanError,
    ResetSpec,
    plan_reset,
)
from stratalog.client.types import GroupDescription, GroupMemberDescription, TopicPartition


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(kafka_topics_action(list(argv)))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


# --- reset-offsets' plan ------------------------------------------------------------------------

def _offsets(committed: int | None, start: int = 10, end: int = 50,
             by_time: int | None = None) -> PartitionOffsets:
    return PartitionOffsets("t", 0, committed, start, end, by_time)


@pytest.mark.parametrize(
    ("spec", "offsets", "new", "clamped"),
    [
        (ResetSpec("to-earliest"), _offsets(30), 10, False),
        (ResetSpec("to-earliest"), _offsets(None), 10, False),
        (ResetSpec("to-latest"), _offsets(30), 50, False),
        (ResetSpec("to-offset", 20), _offsets(30), 20, False),
        (ResetSpec("to-offset", 5), _offsets(30), 10, True),        # below the log start
        (ResetSpec("to-offset", 500), _offsets(30), 50, True),      # past the log end
        (ResetSpec("to-offset", 50), _offsets(30), 50, False),      # the end itself is in
        (ResetSpec("shift-by", -5), _offsets(30), 25, False),
        (ResetSpec("shift-by", 7), _offsets(30), 37, False),
        (ResetSpec("shift-by", -25), _offsets(30), 10, True),
        (ResetSpec("shift-by", 25), _offsets(30), 50, True),
        (ResetSpec("shift-by", 0), _offsets(5), 10, True),          # committed below the start
        (ResetSpec("to-datetime", 1), _offsets(30, by_time=42), 42, False),
        (ResetSpec("to-datetime", 1), _offsets(30, by_time=-1), 50, False),  # none that recent
        (ResetSpec("to-earliest"), _offsets(0, start=0, end=0), 0, False),  # an empty log
    ],
)
def test_plan_reset(spec, offsets, new, clamped):
    (row,) = plan_reset(spec, [offsets])
    assert (row.topic, row.partition, row.current, row.new) == ("t", 0, offsets.committed, new)
    assert row.clamped is clamped


def test_plan_reset_keeps_the_order_and_refuses_a_shift_without_a_committed_offset():
    partitions = [PartitionOffsets("t", 2, 5, 0, 9), PartitionOffsets("t", 0, 1, 0, 9)]
    assert plan_reset(ResetSpec("shift-by", 1), partitions) == [
        PlannedReset("t", 2, 5, 6, 6), PlannedReset("t", 0, 1, 2, 2)]
    with pytest.raises(ResetPlanError, match="t-1 has no committed offset to shift"):
        plan_reset(ResetSpec("shift-by", 1), [*partitions, PartitionOffsets("t", 1, None, 0, 9)])


# --- describe -----------------------------------------------------------------------------------

def _member(member_id: str, *assignment: TopicPartition) -> GroupMemberDescription:
    return GroupMemberDescription(member_id, None, f"client-{member_id}", "10.0.0.1",
                                  tuple(assignment))


def test_describe_rows_join_committed_offsets_log_ends_and_owners():
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    description = GroupDescription("g", "Stable", "consumer", "cooperative-sticky", (
        _member("m1", a1, a0), _member("m2"), _member("m3", b0)))
    rows = describe_rows(description, committed={a0: 7, TopicPartition("c", 3): 2},
                         log_ends={a0: 10, a1: 4, TopicPartition("c", 3): 2})
    assert rows == [
        DescribedPartition("a", 0, 7, 10, "m1", "10.0.0.1", "client-m1"),
        DescribedPartition("a", 1, None, 4, "m1", "10.0.0.1", "client-m1"),
        DescribedPartition("b", 0, None, None, "m3", "10.0.0.1", "client-m3"),
        DescribedPartition("c", 3, 2, 2),                      # committed, owned by no one
        DescribedPartition(None, None, None, None, "m2", "10.0.0.1", "client-m2"),
    ]
    assert [r.lag for r in rows] == [3, None, None, 0, None]
    assert describe_table("g", rows) == [
        DESCRIBE_COLUMNS,
        ("g", "a", "0", "7", "10", "3", "m1", "10.0.0.1", "client-m1"),
        ("g", "a", "1", "-", "4", "-", "m1", "10.0.0.1", "client-m1"),
        ("g", "b", "0", "-", "-", "-", "m3", "10.0.0.1", "client-m3"),
        ("g", "c", "3", "2", "2", "0", "-", "-", "-"),
        ("g", "-", "-", "-", "-", "-", "m2", "10.0.0.1", "client-m2"),
    ]


def test_describe_lag_is_never_negative():
    # A committed offset past the end (the log truncated after the commit) lags by 0.
    assert DescribedPartition("a", 0, 12, 10).lag == 0


# --- arguments ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("argv", "start"),
    [
        ((), "latest"),                                  # Kafka's console consumer's default
        (("--from-beginning",), "earliest"),
        (("--from", "earliest"), "earliest"),
        (("-o", "beginning"), "earliest"),
        (("--from", "latest"), "latest"),
        (("-o", "end"), "latest"),
    ],
)
def test_group_start(argv, start):
    assert group_start(parse("consume", "t", "--group", "g", *argv)) == start


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--partition", "0"), "--partition cannot go with --group"),
        (("--reset", "earliest"), "--reset cannot go with --group"),
        (("--from-timestamp", "-1h"), "--from-timestamp cannot go with --group"),
        (("--from", "42"), "only earliest"),
        (("-o", "-10"), "only earliest"),
        (("--from", "earliest", "--from", "latest"), "only earliest"),
    ],
)
def test_consume_group_refuses_what_a_member_cannot_honour(capsys, argv, words):
    code, err = run(capsys, "consume", "t", "--group", "g", *argv)
    assert code == 2
    assert err.startswith("stratalog consume: ") and words in err, err


def test_group_subscription():
    assert group_subscription(parse("consume", "t", "--group", "g")) == {"topic": "t"}
    assert group_subscription(parse("consume", "a,b,a", "--group", "g")) == {
        "topics": ["a", "b"]}
    assert group_subscription(parse("consume", "--include", "ev.*", "--group", "g"))[
        "pattern"].pattern == "ev.*"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("consume", "--include", "(", "--group", "g"), "is not a regular expression"),
        (("consume", "t", "--include", "x", "--group", "g"), "not both"),
        (("consume", "a,,b", "--group", "g"), "an empty topic name"),
        (("consume", "--include", "t.*"), "--include REGEX needs --group"),
        (("consume", "a,b"), "several topics (a,b) need --group"),
        (("consume",), "TOPIC (or --topic)"),
        (("groups", "describe"), "name the group"),
        (("groups", "describe", "g", "--group", "h"), "two groups"),
        (("groups", "delete"), "name the groups to delete"),
        (("groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon"),
         "--to-datetime"),
        (("groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "-1"),
         "--to-offset must be >= 0"),
        (("groups", "reset-offsets", "g", "--topic", "t:0,x", "--to-latest"), "T:N[,N...]"),
        (("groups", "reset-offsets", "g", "--topic", "t:0", "--partition", "1",
          "--to-latest"), "leave out --partition"),
    ],
)
def test_bad_group_arguments_are_usage_errors_naming_the_problem(capsys, argv, words):
    code, err = run(capsys, *argv)
    assert code == 2
    assert words in err, err


def test_reset_offsets_needs_exactly_one_way(capsys):
    code, err = run(capsys, "groups", "reset-offsets", "g", "--topic", "t")
    assert code == 2 and "say where to: --to-earliest, --to-latest" in err
    code, err = run(capsys, "groups", "reset-offsets", "g", "--topic", "t", "--to-earliest",
                    "--to-latest")
    assert code == 2 and "not allowed with argument" in err


def test_topic_and_partitions():
    def of(*argv: str) -> tuple[str, list[int] | None]:
        return topic_and_partitions(parse("groups", "delete-offsets", "g", *argv))

    assert of("--topic", "t") == ("t", None)
    assert of("--topic", "t", "--partition", "2,0") == ("t", [2, 0])
    assert of("--topic", "t:1,3") == ("t", [1, 3])


@pytest.mark.parametrize(
    ("argv", "action"),
    [
        (("groups", "--list"), "list"),
        (("groups", "--describe", "--group", "g"), "describe"),
        (("groups", "--delete", "--group", "g"), "delete"),
        (("groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"),
         "reset-offsets"),
        (("groups", "--delete-offsets", "--group", "g", "--topic", "t"), "delete-offsets"),
    ],
)
def test_kafka_consumer_groups_actions(argv, action):
    args = parse(*argv)
    assert args.command == "groups" and args.action == action


def test_acls_group_resources(capsys):
    from stratalog.cli.acls import _bindings_to_add
    from stratalog.client.acls import AclOperation, ResourceType

    bindings = _bindings_to_add(parse("acls", "add", "--allow-principal", "User:a",
                                      "--consumer", "--topic", "t", "--group", "g"))
    assert {(b.resource_type, b.resource_name, b.operation) for b in bindings} == {
        (ResourceType.TOPIC, "t", AclOperation.READ),
        (ResourceType.TOPIC, "t", AclOperation.DESCRIBE),
        (ResourceType.GROUP, "g", AclOperation.READ),
    }
    bindings = _bindings_to_add(parse("acls", "add", "--allow-principal", "User:a",
                                      "--operation", "Delete", "--group", "g"))
    assert [(b.resource_type, b.operation) for b in bindings] == [
        (ResourceType.GROUP, AclOperation.DELETE)]
    code, err = run(capsys, "acls", "add", "--allow-principal", "User:a", "--producer",
                    "--group", "g")
    assert code == 2 and "give --operation for the others" in err


def test_a_group_member_of_several_topics_prints_the_topic_first():
    from stratalog.cli.consume import _line
    from stratalog.client.types import ConsumerRecord
    from stratalog.records import TimestampType

    record = ConsumerRecord("a", 1, 7, 1763800000000, TimestampType.CREATE_TIME, b"k", b"v")
    args = parse("consume", "a,b", "--group", "g", "--print-metadata", "--print-key")
    assert _line(record, args, False, with_topic=True) == (
        "a\t1\t7\t2025-11-22T08:26:40.000Z\tk\tv")
    assert _line(record, args, False) == "1\t7\t2025-11-22T08:26:40.000Z\tk\tv"
