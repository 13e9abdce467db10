"""``stratalog topics create|list|describe|delete|alter|clean|elect-leaders|reassign|
reassignments``: topic administration.

Output is for people by default (one line per topic, Kafka-style ``describe``) and for scripts
with ``--format json`` (one JSON document). Configs use Kafka's topic config names
(``--config segment.bytes=1048576``).

``describe`` (and ``alter``) show the configs set on the topic, as ``kafka-topics --describe``
and ``kafka-configs --describe`` do; ``describe --all`` shows every effective config, the
server's defaults included, with Long.MAX_VALUE (9223372036854775807, "no limit" for
``flush.ms``, ``max.compaction.lag.ms``, ``message.timestamp.*.max.ms`` ...) shown as ``none``.
JSON always carries every config as the server stores it (``configs``) and the names set on the
topic (``overridden_configs``).
``describe`` shows each partition's leader, replicas and in-sync replicas (from Metadata; a
single server is broker 0, leader of everything) as ``kafka-topics --describe`` does, and
``create --replication-factor N`` asks for N copies of each partition (cluster mode); without
it a cluster picks its ``default_replication_factor``, and ``create`` prints the factor the
topic got (from Metadata, as ``describe``).
``alter --partitions N`` grows a topic to N partitions (Kafka's ``kafka-topics --alter
--partitions``; the CreatePartitions RPC).
``describe``'s ``LogDirIndex`` says which of the server's ``log_dirs`` holds the partition, by
its position in that list (the server never sends its paths); ``describe --help`` says what
each column means. The topic is the first argument or ``--topic T``, as Kafka's tools take it;
``create --if-not-exists`` and ``delete --if-exists`` make "already there" and "not there"
exit 0 with a line on stderr (Kafka's tool says nothing).
``describe`` also shows the log cleaner's position in each partition of a compacted topic;
``clean`` cleans partitions of a compacted topic now (the CleanPartition RPC;
docs/durability.md, "Compaction: operating it").
``elect-leaders [--topic T [--partition P]] [--unclean]`` moves partitions' leadership back to
their preferred replicas (Kafka's ``kafka-leader-election --election-type PREFERRED``; the
ElectLeaders RPC; docs/cluster.md, "Preferred leaders"): one line per partition, exit 1 when an
election that was needed could not be made.
``reassign TOPIC --partition P --replicas 2,3,4`` (``--cancel``, ``--wait``) and
``reassignments`` move a partition's replicas and show the moves in progress (cli/reassignments.py;
docs/cluster.md, "Reassigning partitions").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from stratalog.client import (
    CleaningResult,
    Client,
    PartitionInfo,
    PartitionLeadership,
    TopicAlreadyExistsError,
    TopicInfo,
    UnknownTopicOrPartitionError,
)
from stratalog.client.errors import StratalogError

from .connection import add_target_argument, connect, fail, run_client_command
from .kafka_habits import add_topic_argument
from .output_format import add_format_argument, wants_json
from .partitions import add_partition_argument, chosen_or_all
from .reassignments import list_reassignments, parse_replicas, reassign
from .timestamps import format_timestamp_ms

__all__ = ["add_parser", "run"]


def _parse_configs(pairs: list[str], command: str) -> dict[str, str]:
    configs: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--config/--set takes NAME=VALUE, got {pair!r}")
        configs[name.strip()] = value.strip()
    return configs


# Kafka's "no limit" for long configs (Long.MAX_VALUE), as people read it.
_INT64_MAX_TEXT = str(2**63 - 1)


def _shown_value(value: str) -> str:
    return "none" if value == _INT64_MAX_TEXT else value


def _topic_json(topic: TopicInfo, leadership: Leadership | None = None) -> dict:
    leadership = leadership or {}
    return {
        "name": topic.name,
        "configs": dict(sorted(topic.configs.items())),
        "overridden_configs": sorted(topic.overridden_configs),
        "partitions": [
            {
                "partition": p.partition,
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "size_bytes": p.size_bytes,
                "segment_count": p.segment_count,
                "max_timestamp": p.max_timestamp,
                "log_dir": p.log_dir,
                **_leadership_json(leadership.get(p.partition)),
                **_cleaner_json(p),
            }
            for p in topic.partitions
        ],
    }


#: Partition number -> its leader, replicas and ISR (Metadata).
Leadership = dict[int, PartitionLeadership]


def _leadership_json(p: PartitionLeadership | None) -> dict:
    if p is None:
        return {}
    return {"leader": p.leader, "leader_epoch": p.leader_epoch, "replicas": list(p.replicas),
            "isr": list(p.isr)}


def _leadership_columns(p: PartitionLeadership | None) -> str:
    """Kafka's ``Leader``, ``Replicas`` and ``Isr`` columns (``none`` for a partition without
    a leader, as kafka-topics prints it)."""
    if p is None:
        return ""
    leader = str(p.leader) if p.leader >= 0 else "none"
    return (f"Leader: {leader}\tReplicas: {','.join(map(str, p.replicas))}\t"
            f"Isr: {','.join(map(str, p.isr))}\t")


async def _leadership(client: Client, name: str) -> Leadership:
    """The topic's partitions as Metadata has them: who leads, who replicates."""
    answer = await client.metadata([name])
    return {p.partition: p for p in answer.topics.get(name, ())}


def _print_description(topic: TopicInfo, show_defaults: bool,
                       leadership: Leadership | None = None) -> None:
    leadership = leadership or {}
    shown = sorted(topic.configs.items()) if show_defaults else sorted(
        (name, value) for name, value in topic.configs.items()
        if name in topic.overridden_configs
    )
    configs = ",".join(f"{k}={_shown_value(v)}" for k, v in shown)
    print(f"Topic: {topic.name}\tPartitionCount: {topic.num_partitions}\tConfigs: {configs}")
    for p in topic.partitions:
        print(
            f"\tTopic: {topic.name}\tPartition: {p.partition}\t"
            + _leadership_columns(leadership.get(p.partition)) +
            f"LogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}\t"
            f"Size: {p.size_bytes}\tSegments: {p.segment_count}\t"
            # LogDir "-": a partition of a cluster topic that this server does not hold.
            f"MaxTimestamp: {format_timestamp_ms(p.max_timestamp)}\t"
            f"LogDirIndex: {p.log_dir or '-'}"
            + _cleaner_columns(p)
        )


# ---------------------------------------------------------------- the log cleaner (issue 16)


def _cleaner_json(p: PartitionInfo) -> dict:
    """The cleaner's position, for the partitions of compacted topics only."""
    if p.cleaned_offset is None:
        return {}
    return {"cleaned_offset": p.cleaned_offset, "dirty_ratio": p.dirty_ratio,
            "last_clean_ms": p.last_clean_ms}


def _cleaner_columns(p: PartitionInfo) -> str:
    """``describe``'s columns for the cleaner's position; none unless the topic is compacted."""
    if p.cleaned_offset is None or p.last_clean_ms is None:
        return ""
    last_clean = "never" if p.last_clean_ms < 0 else format_timestamp_ms(p.last_clean_ms)
    return (f"\tCleanedOffset: {p.cleaned_offset}\tDirtyRatio: {p.dirty_ratio:.3f}"
            f"\tLastClean: {last_clean}")


def _cleaning_json(result: CleaningResult) -> dict:
    return {
        "topic": result.topic,
        "partition": result.partition,
        "first_dirty_offset_before": result.first_dirty_offset_before,
        "end_offset": result.end_offset,
        "bytes_read": result.bytes_read,
        "bytes_written": result.bytes_written,
        "records_read": result.records_read,
        "records_kept": result.records_kept,
        "segments_before": result.segments_before,
        "segments_after": result.segments_after,
        "duration_ms": result.duration_ms,
    }


def _print_cleaning(result: CleaningResult) -> None:
    print(
        f"Cleaned {result.topic}-{result.partition} up to offset {result.end_offset} "
        f"(was {result.first_dirty_offset_before}): kept {result.records_kept} of "
        f"{result.records_read} records, segments {result.segments_before} -> "
        f"{result.segments_after}, read {result.bytes_read} bytes, wrote "
        f"{result.bytes_written} bytes, {result.duration_ms} ms."
    )


async def _clean(client: Client, args: argparse.Namespace) -> int:
    partitions = args.partitions
    if partitions is None:
        partitions = chosen_or_all(None, (await client.describe_topic(args.name)).num_partitions)
    results = []
    as_json = wants_json(args)
    for partition in partitions:
        result = await client.clean_partition(args.name, partition, timeout_s=args.timeout_s)
        if as_json:
            results.append(_cleaning_json(result))
        else:
            _print_cleaning(result)
    if as_json:
        print(json.dumps(results, indent=2))
    return 0


async def _elect_leaders(client: Client, args: argparse.Namespace) -> int:
    """ElectLeaders for the partitions chosen; 1 when an election that was needed failed."""
    chosen: list[tuple[str, int]] | None = None
    if args.name is not None:
        numbers = args.partitions
        if numbers is None:
            numbers = sorted((await _leadership(client, args.name)).keys())
        chosen = [(args.name, number) for number in numbers]
    outcomes = await client.elect_leaders(chosen, unclean=args.unclean)
    failed = {key: error for key, error in outcomes.items()
              if error is not None and error.reason != "ELECTION_NOT_NEEDED"}
    if wants_json(args):
        print(json.dumps([
            {"topic": topic, "partition": partition, "elected": error is None,
             "error": error.reason if error is not None else None,
             "message": error.message if error is not None else None}
            for (topic, partition), error in sorted(outcomes.items())
        ], indent=2))
    else:
        kind = "unclean" if args.unclean else "preferred"
        for (topic, partition), error in sorted(outcomes.items()):
            if error is None:
                print(f"{topic}-{partition}: elected ({kind})")
            elif error.reason == "ELECTION_NOT_NEEDED":
                print(f"{topic}-{partition}: not needed: {error.message}")
            else:
                print(f"{topic}-{partition}: not elected: {error}")
        if not outcomes:
            print("No election needed: every partition is led by its preferred replica."
                  if not args.unclean else "No election needed: every partition has a leader.")
    return 1 if failed else 0


#: ``topics describe --help``: what its columns mean.
_DESCRIBE_COLUMNS = """\
Show a topic's configs, then one line per partition, as kafka-topics.sh --describe:

  Leader, Replicas, Isr     broker ids (a single server is broker 0)
  LogStartOffset            the first offset still held (retention, delete-records move it)
  LogEndOffset              the offset the next record will get
  Size, Segments            bytes and segment files on disk
  MaxTimestamp              the largest record timestamp (- for an empty partition)
  LogDirIndex               which of the server's log_dirs holds the partition: its position
                            in that list, from 0 (- where this server holds no copy)
  CleanedOffset, DirtyRatio, LastClean   the log cleaner's position (compacted topics only)"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    add_topic_argument(create, "name")
    create.add_argument("--if-not-exists", action="store_true",
                        help="a topic of that name already there is not an error (exit 0); "
                             "its partitions and configs are left as they are")
    create.add_argument("--partitions", type=int, default=1, help="number of partitions (>= 1)")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config, e.g. segment.bytes=1048576 (repeatable)")
    create.add_argument("--replication-factor", type=int, default=0, metavar="N",
                        help="copies of each partition, on as many brokers (cluster mode);"
                             " default 0: the server's default_replication_factor")

    actions.add_parser("list", help="list topics")

    describe = actions.add_parser(
        "describe", help="show a topic's partitions and configs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_DESCRIBE_COLUMNS)
    add_topic_argument(describe, "name")
    describe.add_argument("--all", action="store_true",
                          help="every config, the server's defaults too (default: those set "
                               "on the topic); Long.MAX_VALUE is shown as none (no limit)")

    delete = actions.add_parser("delete", help="delete a topic and all its data")
    add_topic_argument(delete, "name")
    delete.add_argument("--if-exists", action="store_true",
                        help="no topic of that name is not an error (exit 0)")

    alter = actions.add_parser("alter", help="change a topic's configs or add partitions")
    add_topic_argument(alter, "name")
    alter.add_argument("--partitions", type=int, default=None, metavar="N",
                       help="grow the topic to N partitions (more than it has: partitions are "
                            "never removed); a key's new records may then go to another "
                            "partition, as in Kafka")
    alter.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="set a config (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="NAME",
                       help="return a config to the server default (repeatable)")

    clean = actions.add_parser(
        "clean", help="clean partitions of a compacted topic now (keep each key's latest record)"
    )
    add_topic_argument(clean, "name")
    add_partition_argument(clean, repeatable=True,
                           help="a partition to clean (repeatable, or N,M; default: every partition)")
    clean.add_argument("--timeout-s", type=float, default=600.0, metavar="SECONDS",
                       help="how long to wait for each cleaning (default: 600)")

    elect = actions.add_parser(
        "elect-leaders",
        help="move partitions' leadership back to their preferred replicas (cluster mode)",
        description="Kafka's kafka-leader-election: each partition named (default: every"
                    " partition of the cluster) is led by its preferred replica, the first of"
                    " its replicas, if that replica is live and in sync (docs/cluster.md).")
    add_topic_argument(elect, "name", required=False,
                       help="only this topic's partitions (default: every topic)")
    add_partition_argument(elect, repeatable=True,
                           help="only this partition of the topic (repeatable, or N,M)")
    elect.add_argument("--unclean", action="store_true",
                       help="elect any live replica of a partition with no live leader, even"
                            " outside the ISR (loses the records only the ISR had)")

    move = actions.add_parser(
        "reassign", help="move a partition's replicas to other brokers (cluster mode)",
        description="Kafka's kafka-reassign-partitions for one partition: the new replicas"
                    " catch up, the leadership leaves a replica being removed, then the"
                    " replicas become the list given (docs/cluster.md).")
    add_topic_argument(move, "name")
    move.add_argument("--partition", type=int, required=True, metavar="P")
    target = move.add_mutually_exclusive_group(required=True)
    target.add_argument("--replicas", type=parse_replicas, metavar="N,M,...",
                        help="the new replicas, the preferred leader first")
    target.add_argument("--cancel", action="store_true",
                        help="cancel the partition's reassignment: back to its original replicas")
    move.add_argument("--wait", action="store_true", help="wait until it is done")
    move.add_argument("--timeout-s", type=float, default=600.0, metavar="SECONDS",
                      help="how long --wait waits (default: 600)")
    ongoing = actions.add_parser(
        "reassignments", help="the partitions being reassigned and their progress")
    add_topic_argument(ongoing, "name", required=False,
                       help="only this topic's partitions (default: every topic)")

    for sub in (create, actions.choices["list"], describe, delete, alter, clean, elect, move,
                ongoing):
        add_target_argument(sub)
        add_format_argument(sub)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    command = f"topics {args.action}"
    try:
        configs = _parse_configs(getattr(args, "config", []) + getattr(args, "set", []), command)
    except ValueError as exc:
        return fail(command, str(exc))
    if args.action == "alter" and not configs and not args.delete and args.partitions is None:
        return fail(command, "nothing to change: give --set NAME=VALUE, --delete NAME or "
                             "--partitions N")

    if args.action == "elect-leaders" and args.partitions is not None and args.name is None:
        return fail(command, "--partition needs the topic: give --topic T (or TOPIC first)")

    async def body() -> int:
        leadership: Leadership = {}
        async with connect(args) as client:
            if args.action == "elect-leaders":
                return await _elect_leaders(client, args)
            if args.action == "reassign":
                return await reassign(client, args)
            if args.action == "reassignments":
                return await list_reassignments(client, args)
            if args.action == "create":
                try:
                    topic = await client.create_topic(
                        args.name, args.partitions, configs,
                        replication_factor=args.replication_factor,
                    )
                except TopicAlreadyExistsError:
                    if not args.if_not_exists:
                        raise
                    # Kafka's kafka-topics.sh says nothing; a line on stderr tells the user
                    # that what is there may not have the partitions or configs asked for.
                    print(f"Topic {args.name} already exists; left as it is (--if-not-exists).",
                          file=sys.stderr)
                    return 0
                # The replicas the topic got (the factor a cluster picked for 0, above all).
                # The topic exists whatever this says: a refusal (no DESCRIBE right, a view
                # not refreshed yet) only leaves the factor out of the line.
                with contextlib.suppress(StratalogError):
                    leadership = await _leadership(client, args.name)
            elif args.action == "alter":
                if args.partitions is not None:
                    topic = await client.create_partitions(args.name, args.partitions)
                if configs or args.delete:
                    topic = await client.alter_topic_configs(args.name, configs, args.delete)
            elif args.action == "describe":
                topic = await client.describe_topic(args.name)
                leadership = await _leadership(client, args.name)
            elif args.action == "clean":
                return await _clean(client, args)
            elif args.action == "delete":
                try:
                    await client.delete_topic(args.name)
                except UnknownTopicOrPartitionError:
                    if not args.if_exists:
                        raise
                    print(f"Topic {args.name} does not exist; nothing deleted (--if-exists).",
                          file=sys.stderr)
                    return 0
                if wants_json(args):
                    print(json.dumps({"deleted": args.name}))
                else:
                    print(f"Deleted topic {args.name}.")
                return 0
            else:
                topics = await client.list_topics()
                if wants_json(args):
                    print(json.dumps([_topic_json(t) for t in topics], indent=2))
                else:
                    for t in topics:
                        print(t.name)
                return 0
        if wants_json(args):
            json.dump(_topic_json(topic, leadership), sys.stdout, indent=2)
            print()
        elif args.action == "create":
            factors = {len(p.replicas) for p in leadership.values()}
            factor = f", replication factor {factors.pop()}" if len(factors) == 1 else ""
            print(f"Created topic {topic.name} with {topic.num_partitions} partition(s){factor}.")
        else:
            _print_description(topic, getattr(args, "all", False), leadership)
        return 0

    return run_client_command(command, body)
