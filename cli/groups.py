"""``stratalog groups list|describe|delete|reset-offsets|delete-offsets``: consumer groups, as
Kafka's ``kafka-consumer-groups.sh`` manages them.

* ``list``: every group, with its protocol type and state (``--state S``, repeatable, keeps
  those states). A server lists only the groups it coordinates (ListGroups; docs/groups.md),
  so in a cluster every live broker of the Metadata answer is asked and the answers merged,
  as Kafka's admin client does (``KafkaAdminClient.listGroups``); a broker that does not
  answer is named on stderr, the others' groups are printed, and the exit code is 1.
* ``describe G``: one row per partition the group has a committed offset for or a member is
  assigned (kafka-consumer-groups.sh ``--describe``'s columns)::

      GROUP  TOPIC   PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST       CLIENT-ID
      g      events  0          40              50              10   stratalog-1  127.0.0.1  stratalog

  CURRENT-OFFSET is the committed offset (``-`` when none), LOG-END-OFFSET the partition's
  log end (ListOffsets latest), LAG their difference (``-`` without a committed offset), and
  the last three the member assigned the partition (``-`` for none; assignments are known
  while the group is Stable, decoded from the consumer protocol's assignment bytes,
  client/groups/consumer_protocol.py). A member with no partition gets a row of its own with
  ``-`` for topic and partition. ``--members`` prints the members instead (CONSUMER-ID,
  GROUP-INSTANCE-ID, HOST, CLIENT-ID, #PARTITIONS, ASSIGNMENT), ``--state`` the group's
  state, protocol type, assignment protocol and member count. ``--format json`` prints all
  of it as one object. A group that does not exist is an error (exit 1).
* ``delete G [G ...]``: DeleteGroups; a group with members is refused with the server's
  NON_EMPTY_GROUP message (exit 1), as Kafka's.
* ``reset-offsets G --topic T [--partition N] (--to-earliest | --to-latest | --to-offset N |
  --shift-by N | --to-datetime T) [--execute]``: prints the plan, each partition's committed
  offset and its new one (cli/reset_plan.py has the rules: Kafka's, with the new offset
  clamped to the log's range), and commits it only with ``--execute``. Refused while the
  group has members (its state must be Empty or Dead, as Kafka's tool requires): a member
  would commit over the reset. A group that does not exist yet gets the offsets (its first
  member starts there). The commit is a simple one (empty member id, generation -1),
  which the coordinator refuses if a member joined meanwhile.
* ``delete-offsets G --topic T [--partition N]``: OffsetDelete of the topic's partitions (all
  of them by default); refused (GROUP_SUBSCRIBED_TO_TOPIC) while a member of the group
  subscribes to the topic.

The group is the first argument or ``--group G`` (Kafka's spelling). Exit codes are
connection.py's: 0 done, 1 refused by the server (the reason printed), 2 bad usage, 3
unreachable. Group RPCs go to the group's coordinator (client/group_calls.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from stratalog.client import EARLIEST, LATEST, Client
from stratalog.client.errors import (
    GroupIdNotFoundError,
    StratalogError,
    UnknownTopicOrPartitionError,
)
from stratalog.client.groups.membership_messages import CommittedOffset, OffsetCommitRequest
from stratalog.client.types import GroupDescription, ListedGroup, TopicPartition

from .connection import (
    EXIT_OK,
    EXIT_REFUSED,
    add_target_argument,
    connect,
    connection_options,
    fail,
    run_client_command,
)
from .output_format import add_format_argument, print_table, wants_json
from .partitions import add_partition_argument, chosen_or_all
from .reset_plan import (
    PartitionOffsets,
    PlannedReset,
    ResetPlanError,
    ResetSpec,
    plan_reset,
)
from .timestamps import TIMESTAMP_HELP, describe_timestamp_ms, parse_timestamp_ms

__all__ = [
    "DESCRIBE_COLUMNS",
    "DescribedPartition",
    "add_parser",
    "describe_rows",
    "describe_table",
    "run",
    "topic_and_partitions",
]

#: The states in which a group's offsets may be reset: no member would commit over them.
_INACTIVE_STATES = ("Empty", "Dead")

#: ``describe``'s columns, kafka-consumer-groups.sh --describe's.
DESCRIBE_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID")
_MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                   "#PARTITIONS", "ASSIGNMENT")
_STATE_COLUMNS = ("GROUP", "STATE", "PROTOCOL-TYPE", "PROTOCOL", "#MEMBERS")
_RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
_MISSING = "-"

#: What each action's runner makes of its arguments: the coroutine the command runs.
_Body = Callable[[], Awaitable[int]]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "groups", help="list, describe, delete consumer groups, reset their offsets",
        description="Consumer groups, as kafka-consumer-groups.sh manages them.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every group, its protocol type and state")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="only groups in this state (Empty, PreparingRebalance, "
                              "CompletingRebalance, Stable, Dead; repeatable)")
    add_format_argument(listing)

    describe = actions.add_parser(
        "describe", help="a group's partitions: committed offset, log end, lag, owner",
        description="Per partition: the committed offset, the log end, the lag and the "
                    "member it is assigned to (kafka-consumer-groups.sh --describe).")
    _add_group_argument(describe)
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true",
                       help="the members and their assignments instead")
    shown.add_argument("--state", action="store_true",
                       help="the group's state, protocol and member count instead")
    add_format_argument(describe, json_help="state, members and partitions in one object")

    delete = actions.add_parser("delete", help="delete empty groups and their offsets")
    delete.add_argument("groups", nargs="*", metavar="GROUP", help="the groups")
    delete.add_argument("--group", dest="group_options", action="append", default=[],
                        metavar="GROUP", help="a group (Kafka's spelling; repeatable)")

    reset = actions.add_parser(
        "reset-offsets", help="move an inactive group's committed offsets (dry run by default)",
        description="Print each partition's committed offset and the new one; commit them "
                    "only with --execute. The group must have no members.")
    _add_group_argument(reset)
    reset.add_argument("--topic", required=True, metavar="TOPIC",
                       help="the topic (or Kafka's T:N,M: these partitions of it)")
    add_partition_argument(reset, repeatable=True,
                           help="only this partition (repeatable, or N,M; default all)")
    # Not required=True: argparse would name the missing choice before a Kafka flag given
    # instead (--by-duration) gets its hint; _reset_spec asks for one.
    how = reset.add_mutually_exclusive_group()
    how.add_argument("--to-earliest", action="store_true", help="the log start")
    how.add_argument("--to-latest", action="store_true", help="the log end")
    how.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    how.add_argument("--shift-by", type=int, metavar="N",
                     help="the committed offset plus N (negative: back)")
    how.add_argument("--to-datetime", metavar="TIME",
                     help=f"the first record at or after TIME: {TIMESTAMP_HELP}")
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only print the plan (the default)")
    add_format_argument(reset)

    delete_offsets = actions.add_parser(
        "delete-offsets", help="delete a group's committed offsets of a topic")
    _add_group_argument(delete_offsets)
    delete_offsets.add_argument("--topic", required=True, metavar="TOPIC",
                                help="the topic (or Kafka's T:N,M: these partitions of it)")
    add_partition_argument(delete_offsets, repeatable=True,
                           help="only this partition (repeatable, or N,M; default all)")

    for sub in (listing, describe, delete, reset, delete_offsets):
        add_target_argument(sub)
    parser.set_defaults(run=run)


def _add_group_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", nargs="?", metavar="GROUP", help="the group")
    parser.add_argument("--group", dest="group_option", metavar="GROUP",
                        help="the same as the first argument (Kafka's spelling)")


def _group_of(args: argparse.Namespace) -> str:
    """The group named by the argument or ``--group``; ValueError if neither or two."""
    positional, option = args.group, args.group_option
    if positional is None and option is None:
        raise ValueError("name the group: GROUP or --group GROUP")
    if positional is not None and option is not None and positional != option:
        raise ValueError(f"two groups: {positional!r} and --group {option!r}; give one")
    group = positional if positional is not None else option
    if not group:
        raise ValueError("the group id must not be empty")
    return group


class _Refused(Exception):
    """What the command found wrong once it asked the server (exit 1, the message printed)."""


def run(args: argparse.Namespace) -> int:
    command = f"groups {args.action}"
    try:
        body = _RUNNERS[args.action](args)
    except ValueError as exc:
        return fail(command, str(exc))

    async def refusals_named() -> int:
        try:
            return await body()
        except _Refused as exc:
            return fail(command, str(exc), EXIT_REFUSED)

    return run_client_command(command, refusals_named)


# --- list ---------------------------------------------------------------------------------------

def _list(args: argparse.Namespace) -> _Body:
    async def body() -> int:
        async with connect(args) as client:
            groups, failures = await _list_everywhere(client, args)
        if wants_json(args):
            print(json.dumps([{"group_id": g.group_id, "protocol_type": g.protocol_type,
                               "state": g.state} for g in groups]))
        elif groups:
            print_table([("GROUP", "PROTOCOL-TYPE", "STATE")] + [
                (g.group_id, g.protocol_type or _MISSING, g.state) for g in groups])
        for address, error in failures:
            fail("groups list", f"broker {address} did not answer ({error}); its groups are "
                                "not listed", EXIT_REFUSED)
        return EXIT_REFUSED if failures else EXIT_OK
    return body


async def _list_everywhere(
    client: Client, args: argparse.Namespace,
) -> tuple[list[ListedGroup], list[tuple[str, str]]]:
    """ListGroups of every live broker (module docstring), merged and sorted by group id; and
    the brokers that did not answer, with their error. A single server is asked through
    ``client`` alone."""
    brokers = (await client.metadata()).brokers
    if len(brokers) <= 1:
        return await client.list_groups(args.state), []
    found: dict[str, ListedGroup] = {}
    failures: list[tuple[str, str]] = []
    options = connection_options(args)
    for broker in brokers:  # one at a time: a cluster's brokers are few
        async with Client(broker.address, **options) as one:
            try:
                listed = await one.list_groups(args.state)
            except StratalogError as exc:
                failures.append((broker.address, exc.message))
                continue
        for group in listed:
            found[group.group_id] = group  # a group moving between brokers: listed once
    return sorted(found.values(), key=lambda g: g.group_id), failures


# --- describe -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DescribedPartition:
    """One row of ``describe``: a partition (None for a member with none), its committed
    offset and log end (None: unknown), and the member assigned it (None: none)."""

    topic: str | None
    partition: int | None
    committed: int | None
    log_end: int | None
    member_id: str | None = None
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(0, self.log_end - self.committed)


def describe_rows(
    description: GroupDescription, committed: dict[TopicPartition, int],
    log_ends: dict[TopicPartition, int],
) -> list[DescribedPartition]:
    """``describe``'s rows: every partition committed or assigned, sorted by topic and
    partition, with its owner; then each member that has no partition. Pure."""
    owners = {tp: member for member in description.members for tp in member.assignment}
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        member = owners.get(tp)
        rows.append(DescribedPartition(
            tp.topic, tp.partition, committed.get(tp), log_ends.get(tp),
            member.member_id if member else None, member.client_host if member else None,
            member.client_id if member else None))
    for member in description.members:
        if not member.assignment:
            rows.append(DescribedPartition(None, None, None, None, member.member_id,
                                           member.client_host, member.client_id))
    return rows


def _cell(value: object) -> str:
    """A table cell: ``-`` for what is unknown or empty (a member without a client id)."""
    return _MISSING if value is None or value == "" else str(value)


def describe_table(group_id: str, rows: Sequence[DescribedPartition]) -> list[tuple[str, ...]]:
    """``describe``'s text table (header first) of :func:`describe_rows`' rows."""
    return [DESCRIBE_COLUMNS] + [
        (group_id, _cell(r.topic), _cell(r.partition), _cell(r.committed), _cell(r.log_end),
         _cell(r.lag), _cell(r.member_id), _cell(r.host), _cell(r.client_id))
        for r in rows
    ]


async def _log_ends(client: Client, partitions: Sequence[TopicPartition]
                    ) -> dict[TopicPartition, int]:
    """Each partition's log end; a deleted topic's partitions are left out (``-``)."""
    ends = {}
    for tp in partitions:
        try:
            ends[tp] = (await client.list_offsets(tp.topic, tp.partition, LATEST)).offset
        except UnknownTopicOrPartitionError:
            continue
    return ends


def _describe(args: argparse.Namespace) -> _Body:
    group_id = _group_of(args)

    async def body() -> int:
        async with connect(args) as client:
            (description,) = await client.describe_groups([group_id])
            if isinstance(description.error, GroupIdNotFoundError):
                raise _Refused(f"consumer group {group_id!r} does not exist")
            if description.error is not None:
                raise description.error
            committed = {tp: o.offset for tp, o in (await client.offset_fetch(group_id)).items()}
            if description.state == "Dead" and not description.members and not committed:
                raise _Refused(f"consumer group {group_id!r} does not exist")
            assigned = {tp for member in description.members for tp in member.assignment}
            log_ends = await _log_ends(client, sorted(set(committed) | assigned))
        rows = describe_rows(description, committed, log_ends)
        if wants_json(args):
            print(json.dumps(_describe_json(description, rows)))
        elif args.state:
            print_table([_STATE_COLUMNS, (
                group_id, description.state, description.protocol_type or _MISSING,
                description.protocol_name or _MISSING, str(len(description.members)))])
        elif args.members:
            if description.members:
                print_table([_MEMBER_COLUMNS] + [(
                    group_id, m.member_id, _cell(m.group_instance_id), _cell(m.client_host),
                    _cell(m.client_id), str(len(m.assignment)),
                    ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment))
                    or _MISSING) for m in description.members])
        elif rows:
            print_table(describe_table(group_id, rows))
        # Kafka's tool says why the table is short, on stderr.
        if not description.members:
            print(f"consumer group {group_id!r} has no active members", file=sys.stderr)
        elif description.state != "Stable":
            print(f"consumer group {group_id!r} is rebalancing ({description.state}): "
                  "assignments are known once it is Stable", file=sys.stderr)
        return EXIT_OK
    return body


def _describe_json(description: GroupDescription, rows: Sequence[DescribedPartition]) -> dict:
    return {
        "group_id": description.group_id,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol_name,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "host": m.client_host,
            "assignment": [[tp.topic, tp.partition] for tp in sorted(m.assignment)],
        } for m in description.members],
        "partitions": [{
            "topic": r.topic, "partition": r.partition, "committed_offset": r.committed,
            "log_end_offset": r.log_end, "lag": r.lag, "member_id": r.member_id,
            "host": r.host, "client_id": r.client_id,
        } for r in rows if r.topic is not None],
    }


# --- delete -------------------------------------------------------------------------------------

def _delete(args: argparse.Namespace) -> _Body:
    group_ids = list(dict.fromkeys([*args.groups, *args.group_options]))
    if not group_ids:
        raise ValueError("name the groups to delete: GROUP ... or --group GROUP")

    async def body() -> int:
        async with connect(args) as client:
            results = await client.delete_groups(group_ids)
        failed = 0
        for result in results:
            if result.error is None:
                print(f"deleted consumer group {result.group_id!r}")
                continue
            failed += 1
            reason = getattr(result.error, "reason", None)
            message = getattr(result.error, "message", str(result.error))
            fail("groups delete", f"consumer group {result.group_id!r} not deleted: {message}"
                                  + (f" [{reason}]" if reason else ""), EXIT_REFUSED)
        return EXIT_REFUSED if failed else EXIT_OK
    return body


# --- reset-offsets ------------------------------------------------------------------------------

def _reset_spec(args: argparse.Namespace) -> ResetSpec:
    if args.to_earliest:
        return ResetSpec("to-earliest")
    if args.to_latest:
        return ResetSpec("to-latest")
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise ValueError(f"--to-offset must be >= 0, got {args.to_offset}")
        return ResetSpec("to-offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift-by", args.shift_by)
    if args.to_datetime is None:
        raise ValueError("say where to: --to-earliest, --to-latest, --to-offset N, --shift-by N "
                         "or --to-datetime TIME")
    try:
        return ResetSpec("to-datetime", parse_timestamp_ms(args.to_datetime))
    except ValueError as exc:
        raise ValueError(f"--to-datetime: {exc}") from None


def topic_and_partitions(args: argparse.Namespace) -> tuple[str, list[int] | None]:
    """``--topic T`` and ``--partition``, or Kafka's ``--topic T:0,1`` (topic names hold no
    colon): the topic and the partitions named (None: all).

    Raises:
        ValueError: partitions named both ways, or not numbers >= 0.
    """
    topic, colon, listed = args.topic.partition(":")
    if not colon:
        return topic, args.partitions
    if args.partitions is not None:
        raise ValueError(f"--topic {args.topic} names partitions: leave out --partition")
    try:
        partitions = [int(p) for p in listed.split(",")]
    except ValueError:
        raise ValueError(f"--topic {args.topic}: expected T:N[,N...] with partition numbers"
                         ) from None
    if not topic or any(p < 0 for p in partitions) or len(set(partitions)) != len(partitions):
        raise ValueError(f"--topic {args.topic}: expected T:N[,N...], each partition >= 0 once")
    return topic, partitions


async def _partitions(client: Client, topic: str, chosen: Sequence[int] | None) -> list[int]:
    """The partitions ``--partition`` named (default all), each checked to exist."""
    count = (await client.describe_topic(topic)).num_partitions
    partitions = chosen_or_all(chosen, count)
    missing = [p for p in partitions if p >= count]
    if missing:
        raise _Refused(f"partitions {missing} do not exist: topic {topic!r} has {count} "
                         "partitions")
    return partitions


def _reset(args: argparse.Namespace) -> _Body:
    group_id = _group_of(args)
    spec = _reset_spec(args)
    topic, chosen = topic_and_partitions(args)
    if spec.kind == "to-datetime":
        print(f"resetting to the first offsets at or after {describe_timestamp_ms(spec.value)}",
              file=sys.stderr)

    async def body() -> int:
        async with connect(args) as client:
            (description,) = await client.describe_groups([group_id])
            # A group that does not exist yet may be given offsets (its first consumer starts
            # there), as with Kafka's tool.
            if description.error is not None and not isinstance(description.error,
                                                                GroupIdNotFoundError):
                raise description.error
            if description.error is None and description.state not in _INACTIVE_STATES:
                raise _Refused(
                    f"consumer group {group_id!r} is {description.state} with "
                    f"{len(description.members)} members: offsets can be reset only while it "
                    "has none (Empty); stop its consumers first")
            partitions = await _partitions(client, topic, chosen)
            committed = await client.offset_fetch(
                group_id, [TopicPartition(topic, p) for p in partitions])
            read = []
            for p in partitions:
                tp = TopicPartition(topic, p)
                by_time = None
                if spec.kind == "to-datetime":
                    by_time = (await client.list_offsets(topic, p, spec.value)).offset
                read.append(PartitionOffsets(
                    topic, p, committed[tp].offset if tp in committed else None,
                    (await client.list_offsets(topic, p, EARLIEST)).offset,
                    (await client.list_offsets(topic, p, LATEST)).offset, by_time))
            try:
                plan = plan_reset(spec, read)
            except ResetPlanError as exc:
                raise _Refused(str(exc)) from None
            if args.execute:
                await client.offset_commit(OffsetCommitRequest(
                    group_id, generation_id=-1, member_id="", group_instance_id=None,
                    offsets=tuple(CommittedOffset(r.topic, r.partition, r.new) for r in plan)))
        _print_plan(args, group_id, plan)
        return EXIT_OK
    return body


def _print_plan(args: argparse.Namespace, group_id: str, plan: Sequence[PlannedReset]) -> None:
    if wants_json(args):
        print(json.dumps({"group_id": group_id, "executed": bool(args.execute), "partitions": [
            {"topic": r.topic, "partition": r.partition, "current_offset": r.current,
             "new_offset": r.new, "clamped": r.clamped} for r in plan]}))
    else:
        print_table([_RESET_COLUMNS] + [
            (group_id, r.topic, str(r.partition), _cell(r.current), str(r.new)) for r in plan])
    for r in plan:
        if r.clamped:
            print(f"{r.topic}-{r.partition}: offset {r.wanted} is outside the log, "
                  f"{r.new} instead", file=sys.stderr)
    if not args.execute:
        print("dry run: nothing changed; --execute commits these offsets", file=sys.stderr)


# --- delete-offsets -----------------------------------------------------------------------------

def _delete_offsets(args: argparse.Namespace) -> _Body:
    group_id = _group_of(args)
    topic, chosen = topic_and_partitions(args)

    async def body() -> int:
        async with connect(args) as client:
            partitions = await _partitions(client, topic, chosen)
            await client.offset_delete(group_id, [(topic, p) for p in partitions])
        print_table([("TOPIC", "PARTITION", "STATUS")]
                    + [(topic, str(p), "deleted") for p in partitions])
        return EXIT_OK
    return body


_RUNNERS = {
    "list": _list,
    "describe": _describe,
    "delete": _delete,
    "reset-offsets": _reset,
    "delete-offsets": _delete_offsets,
}
