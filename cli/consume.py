"""``stratalog consume TOPIC``: print records, from an offset, a timestamp, earliest or latest.

Text output prints one value per line (``--print-key`` puts the key and ``--key-separator``
before it; ``--print-headers`` puts the headers before that, as Kafka's console consumer's
``print.headers=true`` does: ``KEY:VALUE`` pairs joined by ``,``, or ``NO_HEADERS``;
``--print-metadata`` prefixes partition, offset and timestamp). A null key, value or header value
prints as ``null``. JSON output prints one object per line::

    {"topic": "t", "partition": 0, "offset": 7, "timestamp": 1763800000000,
     "timestamp_type": "CREATE_TIME", "key": "k", "value": "v",
     "headers": [["h", "x"], ["h", "y"]]}

Keys, values and header values are UTF-8 text; bytes that are not valid UTF-8 are given as
``{"base64": "..."}`` instead, so that no byte is lost. Headers are ``[key, value]`` pairs in
record order, as kcat ``-J`` writes them (Kafka allows a key twice). Without ``--follow`` the
command stops at the end of every partition; with it, it waits for new records until interrupted
or until ``--max-records`` were printed.

Where to start and stop: ``--from`` (also ``--offset``, ``-o``) takes every form of kcat's
``-o``: ``earliest``/``beginning`` (the default; ``--from-beginning`` too), ``latest``/``end``,
an offset, ``-N`` (the last N records of each partition), ``s@TIME`` and ``e@TIME`` (stop each
partition before its first record at or after TIME; the command ends when every partition got
there, even with ``--follow``, as kcat does). stratalog.cli.read_range has the details.

When stdout is not a terminal and stderr is (``consume T > records.txt``), a progress line on
stderr counts the records read (``--progress``/``--no-progress`` to choose).

``--from OFFSET`` outside a partition's log (past its end, or below its start after retention)
is an error, exit 1, naming the partition, the offset and the offsets the log holds, unless
``--reset earliest|latest`` (Kafka's ``auto.offset.reset``) says where to go instead; a reset
prints one line on stderr. ``--from-timestamp`` takes ms, ISO-8601 (a time without a zone is
UTC) or a relative time (``-1h``); the instant it was read as is printed on stderr.

``--isolation-level read_committed`` prints only records of committed transactions (and those
written outside transactions), and without ``--follow`` stops at each partition's last stable
offset; ``read_uncommitted`` (the default, as Kafka's console consumer) prints every record.
Transaction markers are never printed.

``--group G`` reads as a member of consumer group G (docs/groups.md), as
``kafka-console-consumer.sh --group`` does: the group's coordinator gives this process some of
the topic's partitions (all of them while it is the only member), each read from the group's
committed offset, and the offsets of the records printed are committed as it goes (the
Consumer's auto-commit, every ``--auto-commit-interval-ms``). Several topics are named
``a,b`` (topic names hold no comma) or with ``--include REGEX`` (the topics matching it in
full, picked up as they are created). Where the group has no committed offset for a
partition, ``--from earliest`` (``--from-beginning``) or ``--from latest`` (the default, as
Kafka's console consumer) says where to start; the other ``--from`` forms, ``--partition``
and ``--reset`` are refused with a group. A group member reads until Ctrl-C (SIGINT),
SIGTERM or ``--max-records``: then it commits the offsets of what it printed, leaves the
group (its partitions go to the other members at once, not after a session timeout) and
exits 0 (``--max-records``) or 128 + the signal's number (130, 143); a second signal is not
waited for (it stops at once, as without a group). The next ``consume
--group G`` starts after the last record printed: nothing read twice, nothing skipped, unless
the process was killed without a chance to commit (then it re-reads what it printed since the
last auto-commit).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import re
import signal
import sys
from collections.abc import Sequence

from tqdm import tqdm

from stratalog.client import (
    Client,
    Consumer,
    ConsumerRecord,
    IsolationLevel,
    OffsetOutOfRangeError,
    OffsetReset,
)
from stratalog.client.types import TopicPartition
from stratalog.records import Header

from .connection import (
    EXIT_REFUSED,
    add_target_argument,
    connection_options,
    fail,
    run_client_command,
)
from .kafka_habits import add_topic_argument
from .output_format import add_format_argument, wants_json
from .partitions import add_partition_argument
from .read_range import WHERE_HELP, read_range
from .timestamps import TIMESTAMP_HELP, describe_timestamp_ms, format_timestamp_ms

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", help="print a topic's records",
        description="Print a topic's records, from where --from says, to the end of every "
                    "partition (or, with --follow, until interrupted).")
    add_topic_argument(parser, help="the topic (with --group: T1,T2,... for several)",
                       required=False)
    parser.add_argument("--group", metavar="GROUP",
                        help="read as a member of this consumer group: its partitions start at "
                             "the group's committed offsets, and what is printed is committed "
                             "(reads until Ctrl-C, SIGTERM or --max-records)")
    parser.add_argument("--include", metavar="REGEX",
                        help="with --group: the topics whose whole name matches REGEX")
    parser.add_argument("--auto-commit-interval-ms", type=int, default=5_000, metavar="MS",
                        help="with --group: how often the offsets of what was printed are "
                             "committed (default 5000; on exit they are committed too)")
    add_partition_argument(parser, repeatable=True,
                           help="read only this partition (repeatable, or N,M: these "
                                "partitions; default all)")
    parser.add_argument("--from", "--offset", "-o", dest="wheres", action="append",
                        metavar="WHERE", help=WHERE_HELP)
    parser.add_argument("--from-beginning", dest="wheres", action="append_const",
                        const="earliest", help="the same as --from earliest (the default)")
    parser.add_argument("--from-timestamp", metavar="TIME",
                        help=f"the first record at or after TIME: {TIMESTAMP_HELP}")
    parser.add_argument("--reset", choices=("earliest", "latest", "none"), default="none",
                        help="where to go when an offset is outside the log, as Kafka's "
                             "auto.offset.reset: earliest (the log start), latest (the log end), "
                             "or none (default: an error, exit 1)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep waiting for new records")
    parser.add_argument("--max-records", "--max-messages", type=int, metavar="N",
                        help="stop after N records")
    parser.add_argument("--isolation-level", default="read_uncommitted",
                        choices=("read_uncommitted", "read_committed"),
                        help="read_committed: only records of committed transactions "
                             "(default read_uncommitted)")
    add_format_argument(parser, json_help="one object per record")
    parser.add_argument("--print-key", action="store_true", help="text: print keys too")
    parser.add_argument("--print-headers", action="store_true",
                        help="text: print headers too, as KEY:VALUE,... (NO_HEADERS when none), "
                             "before the key (JSON output always has them)")
    parser.add_argument("--print-metadata", action="store_true",
                        help="text: prefix partition, offset and timestamp")
    parser.add_argument("--key-separator", default="\t", metavar="SEP",
                        help="text: between key and value (default a tab)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="a line on stderr counting the records read (default: when "
                             "stdout is not a terminal and stderr is)")
    add_target_argument(parser)
    parser.set_defaults(run=run)


def _json_bytes(data: bytes | None) -> str | dict | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _json_line(record: ConsumerRecord) -> str:
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "timestamp_type": record.timestamp_type.name,
            "key": _json_bytes(record.key),
            "value": _json_bytes(record.value),
            "headers": [[key, _json_bytes(value)] for key, value in record.headers],
        },
        ensure_ascii=False,
    )


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _line(record: ConsumerRecord, args: argparse.Namespace, json_output: bool, *,
          with_topic: bool = False) -> str:
    """One record as printed (module docstring); ``with_topic``: the metadata prefix starts
    with the topic (a group member reading several topics)."""
    if json_output:
        return _json_line(record)
    line = _text(record.value)
    if args.print_key:
        line = f"{_text(record.key)}{args.key_separator}{line}"
    if args.print_headers:
        line = f"{_text_headers(record.headers)}{args.key_separator}{line}"
    if args.print_metadata:
        line = (f"{record.partition}\t{record.offset}\t"
                f"{format_timestamp_ms(record.timestamp)}\t{line}")
        if with_topic:
            line = f"{record.topic}\t{line}"
    return line


def _show_progress(args: argparse.Namespace) -> bool:
    """Whether to count records on stderr: asked for, or by default when the records go to a
    file or a pipe (no one sees them arrive) while a person watches stderr."""
    if args.progress is not None:
        return args.progress
    return not sys.stdout.isatty() and sys.stderr.isatty()


def _text_headers(headers: Sequence[Header]) -> str:
    """Kafka's DefaultMessageFormatter with print.headers=true: ``k1:v1,k2:v2``, or
    ``NO_HEADERS``."""
    if not headers:
        return "NO_HEADERS"
    return ",".join(f"{key}:{_text(value)}" for key, value in headers)


def run(args: argparse.Namespace) -> int:
    if args.topic is None and args.include is None:
        return fail("consume", "the following arguments are required: TOPIC (or --topic), or "
                               "--include REGEX with --group")
    if args.group is not None:
        return _run_group(args)
    if args.include is not None:
        return fail("consume", "--include REGEX needs --group GROUP (a pattern subscribes a "
                               "group member); without one, name the topic")
    if "," in args.topic:
        return fail("consume", f"several topics ({args.topic}) need --group GROUP; without "
                               "one, consume reads one topic")
    try:
        where = read_range(args.wheres, args.from_timestamp)
    except ValueError as exc:
        return fail("consume", str(exc))
    if where.start_timestamp_ms is not None:
        print(f"reading from {describe_timestamp_ms(where.start_timestamp_ms)}", file=sys.stderr)
    if where.end_timestamp_ms is not None:
        print(f"stopping each partition before {describe_timestamp_ms(where.end_timestamp_ms)}",
              file=sys.stderr)
    if args.max_records is not None and args.max_records < 0:
        return fail("consume", f"--max-records must be >= 0, got {args.max_records}")

    # The Consumer logs each reset at WARNING, which Python's last-resort handler would print
    # too; tell_reset prints it once, in the command's words.
    logging.getLogger("stratalog.client.consumer").addHandler(logging.NullHandler())

    json_output = wants_json(args)
    progress = tqdm(unit=" records", file=sys.stderr, desc=args.topic, mininterval=0.5,
                    disable=not _show_progress(args))

    def tell_reset(reset: OffsetReset) -> None:
        # tqdm.write: on a line of its own above the progress line, when there is one.
        tqdm.write(f"stratalog consume: {reset.topic}-{reset.partition}: offset {reset.offset} "
                   f"is out of range [{reset.log_start_offset}, {reset.log_end_offset}); "
                   f"--reset {args.reset}: reading from offset {reset.new_offset}",
                   file=sys.stderr)

    async def body() -> int:
        try:
            return await read()
        except OffsetOutOfRangeError as exc:
            progress.close()  # the error on a line of its own, after the count
            sys.stdout.flush()  # what was printed before stays printed
            return fail("consume", f"{exc.message}; --reset earliest or --reset latest "
                                   "continues from the log start or end instead", EXIT_REFUSED)
        finally:
            progress.close()

    async def read() -> int:
        printed = 0
        if args.max_records == 0:
            return 0
        out = sys.stdout
        async with Consumer(
            args.target, args.topic, partitions=args.partitions, start=where.start,
            start_timestamp_ms=where.start_timestamp_ms, follow=args.follow,
            isolation_level=IsolationLevel[args.isolation_level.upper()],
            auto_offset_reset=args.reset, on_offset_reset=tell_reset,
            **connection_options(args),
        ) as consumer:
            if where.tail_records is not None:
                await _seek_to_tail(consumer, where.tail_records)
            # Partitions that reached e@TIME: their later records are not printed, and the
            # command ends when every partition got there (even with --follow, as kcat does).
            stopped: set[int] = set()
            async for record in consumer:
                if where.end_timestamp_ms is not None:
                    if record.partition in stopped:
                        continue
                    if record.timestamp >= where.end_timestamp_ms:
                        stopped.add(record.partition)
                        if len(stopped) == len(consumer.partitions):
                            break
                        continue
                out.write(_line(record, args, json_output) + "\n")
                printed += 1
                if not progress.disable:
                    progress.update()
                if args.follow:
                    out.flush()  # someone is watching: show each record as it comes
                if args.max_records is not None and printed >= args.max_records:
                    break
        out.flush()
        return 0

    return run_client_command("consume", body)


async def _seek_to_tail(consumer: Consumer, records: int) -> None:
    """Move every partition to ``records`` offsets before its end (not below its log start).

    The Consumer started at each partition's end; the log start comes from seeking to the
    beginning, which also drops whatever was fetched at the end.
    """
    ends = {partition: consumer.position(partition) for partition in consumer.partitions}
    await consumer.seek_to_beginning()
    for partition, end in ends.items():
        consumer.seek(partition, max(consumer.position(partition), end - records))


class _MemberFailureNotes(logging.Filter):
    """Drops the group member's ERROR lines that restate the failure the reader gets: the
    command prints that failure once, in its own words (as main.py's _FinalFailureNotes for
    the Producer's)."""

    _RESTATED = ("group %s: the consumer stopped: ", "group %s: the member stops: ")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self._RESTATED))


_MEMBER_FAILURE_NOTES = _MemberFailureNotes()
_MEMBER_LOGGERS = ("stratalog.client.group_consumer", "stratalog.client.groups.group_membership")


#: The signals after which a group member commits what it printed and leaves (module
#: docstring); the exit code is 128 + the signal's number, as a shell reports a signal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The client id of `consume --group`'s member (Kafka's console consumer: "console-consumer").
GROUP_CLIENT_ID = "stratalog-consume"


def group_start(args: argparse.Namespace) -> str:
    """Where a group member starts a partition the group has no committed offset for: the
    ``--from``/``--from-beginning`` given (earliest or latest only), else latest (Kafka's
    console consumer's default with a group).

    Raises:
        ValueError: an option a group member cannot honour (``--partition``, ``--reset``,
            ``--from-timestamp``, another ``--from`` form), named.
    """
    if args.partitions is not None:
        raise ValueError("--partition cannot go with --group: the group assigns the partitions")
    if args.reset != "none":
        raise ValueError("--reset cannot go with --group: --from earliest|latest says where a "
                         "partition without a committed offset (or with one outside the log) "
                         "starts")
    if args.from_timestamp is not None:
        raise ValueError("--from-timestamp cannot go with --group: a group member starts at the "
                         "committed offsets (reset them with stratalog groups reset-offsets "
                         "--to-datetime)")
    wheres = args.wheres or ["latest"]
    starts = {w.strip().lower() for w in wheres}
    starts = {"earliest" if w == "beginning" else "latest" if w == "end" else w for w in starts}
    if len(starts) != 1 or not starts <= {"earliest", "latest"}:
        raise ValueError(f"--from {' '.join(wheres)} cannot go with --group: only earliest "
                         "(--from-beginning) or latest, where the group has no committed offset "
                         "(stratalog groups reset-offsets moves committed ones)")
    return starts.pop()


def group_subscription(args: argparse.Namespace) -> dict[str, object]:
    """The Consumer's ``topic=``/``topics=``/``pattern=`` of a group member: ``--include``, or
    the topic argument, several when comma-separated.

    Raises:
        ValueError: both, an empty topic in the list, or a REGEX that does not compile.
    """
    if args.include is not None:
        if args.topic is not None:
            raise ValueError("give TOPIC or --include REGEX, not both")
        try:
            return {"pattern": re.compile(args.include)}
        except re.error as exc:
            raise ValueError(f"--include {args.include!r} is not a regular expression: {exc}"
                             ) from None
    topics = args.topic.split(",")
    if not all(topics):
        raise ValueError(f"an empty topic name in {args.topic!r}")
    if len(topics) == 1:
        return {"topic": topics[0]}
    return {"topics": list(dict.fromkeys(topics))}


def _run_group(args: argparse.Namespace) -> int:
    """``consume --group``: read as a member of the group until a stop signal or
    ``--max-records``, then commit what was printed and leave (module docstring)."""
    try:
        start = group_start(args)
        subscription = group_subscription(args)
    except ValueError as exc:
        return fail("consume", str(exc))
    if args.max_records is not None and args.max_records < 0:
        return fail("consume", f"--max-records must be >= 0, got {args.max_records}")
    if not args.group:
        return fail("consume", "--group must not be empty")
    logging.getLogger("stratalog.client.consumer").addHandler(logging.NullHandler())
    for name in _MEMBER_LOGGERS:
        logging.getLogger(name).addFilter(_MEMBER_FAILURE_NOTES)  # once: a filter set
    json_output = wants_json(args)
    with_topic = "topic" not in subscription
    progress = tqdm(unit=" records", file=sys.stderr, desc=args.topic or args.include,
                    mininterval=0.5, disable=not _show_progress(args))

    def tell_reset(reset: OffsetReset) -> None:
        tqdm.write(f"stratalog consume: {reset.topic}-{reset.partition}: offset {reset.offset} "
                   f"is out of range [{reset.log_start_offset}, {reset.log_end_offset}); "
                   f"reading from offset {reset.new_offset} ({start})", file=sys.stderr)

    stopped_by: list[int] = []

    async def print_records(consumer: Consumer) -> None:
        """Print until ``--max-records`` or a stop signal; every record handed out is printed
        before the next await, so the Consumer's positions (what close() commits) are what was
        printed. The signal is looked for after each record: the Consumer hands out a whole
        fetch's records without an await, which a loop's signal callback would wait for."""
        if args.max_records == 0:
            return
        printed = 0
        out = sys.stdout
        async for record in consumer:
            if stopped_by:
                # Handed out but not printed: back to it, so that the commit leaves it to the
                # next member.
                consumer.seek(TopicPartition(record.topic, record.partition), record.offset)
                return
            out.write(_line(record, args, json_output, with_topic=with_topic) + "\n")
            out.flush()  # a member reads until stopped: show each record as it comes
            printed += 1
            if not progress.disable:
                progress.update()
            if args.max_records is not None and printed >= args.max_records:
                return

    async def body() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal(signum: int, frame: object) -> None:
            # A Python-level handler, run between two bytecodes even while the reader prints
            # a fetch's records without awaiting; it wakes the loop as asyncio.Runner's own
            # SIGINT handler does (call_soon_threadsafe).
            stopped_by.append(signum)
            loop.call_soon_threadsafe(stop.set)
            # A second signal is not waited for: the previous handlers take it (a second
            # Ctrl-C stops at once, without the commit and the leave, as asyncio.run's does).
            for number, handler in previous.items():
                signal.signal(number, handler)

        # Named as Kafka's console consumer names itself ("console-consumer"): the member's
        # client id in `stratalog groups describe`.
        client = Client(args.target, client_id=GROUP_CLIENT_ID, **connection_options(args))
        try:
            # Topics named must exist: an error at once, as without a group (a member would
            # wait for them silently). A pattern may match nothing yet: it waits.
            for topic in subscription.get("topics") or [subscription.get("topic")]:
                if topic is not None:
                    await client.describe_topic(topic)
        except BaseException:
            await client.close()
            raise
        previous = {signum: signal.signal(signum, on_signal) for signum in _STOP_SIGNALS}
        consumer = Consumer(
            client, **subscription, group_id=args.group,  # type: ignore[arg-type]
            auto_offset_reset=start, auto_commit_interval_ms=args.auto_commit_interval_ms,
            isolation_level=IsolationLevel[args.isolation_level.upper()],
            on_offset_reset=tell_reset,
        )
        try:
            # The reading is a task of its own, so that a signal stops it at its next await
            # (between two records) while this coroutine, not cancelled, closes the Consumer:
            # close() commits the positions (what was printed) and leaves the group.
            reading = asyncio.ensure_future(print_records(consumer))
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                if not reading.done():
                    reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading  # raises the reading's error, if it ended with one
        finally:
            progress.close()
            sys.stdout.flush()
            try:
                await consumer.close()
            finally:
                await client.close()
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        if stopped_by:
            name = signal.Signals(stopped_by[0]).name
            print(f"stratalog consume: {name}: committed the offsets of what was printed and "
                  f"left group {args.group!r}", file=sys.stderr)
            return 128 + stopped_by[0]
        return 0

    return run_client_command("consume", body)
