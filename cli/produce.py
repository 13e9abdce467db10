"""``stratalog produce TOPIC``: append lines from stdin or a file, one record per line.

Each line (without its line ending) is a record value. With ``--key-separator SEP`` the text
before the first SEP is the key; a line without SEP stops the command with an error naming the
line (Kafka's console producer's "No key separator found on line number N"), unless
``--allow-keyless-lines`` sends it as a record without a key. ``--empty-as-null`` sends an empty
value as a null one, a tombstone (``kcat -Z``); ``--header KEY=VALUE`` (repeatable, ``-H`` as
kcat's) puts headers on every record. Records go through the client's batching ``Producer``
(partitioned by key like a Kafka producer, sticky for unkeyed lines, or all to ``--partition``),
acknowledged by every in-sync replica unless ``--acks 1`` or ``--acks 0`` (Kafka's acks),
idempotent unless ``--no-idempotence`` or acks below all.

Input is sent as it arrives: the event loop reads whatever is there whenever the input is
readable (:mod:`.line_reader`), so a line typed at a terminal or written by ``tail -f`` is sent
within ``--linger-ms`` (kafka-console-producer and ``kcat -P`` do the same), while a pipe is
read as fast as its writer fills it and a file 64 KiB at a time. A file shows a progress bar on
stderr when stderr is a terminal. The summary line on stderr says how many records were
acknowledged.

The server is asked for the topic before any line is read: no server answering at ``--target``
ends the command at once (exit 3), as ``consume`` does, and an unknown topic too (exit 1)
unless the server creates it (``auto_create_topics_enable``).
Once it has answered, a server that stops answering is retried until ``--delivery-timeout-ms``
(a commit or an abort too): the first failure is printed at once, then every few seconds a
line counts down to when the records waiting are given up. A record the server refuses (no
WRITE right, too large) is reported once: in the summary line when the input ends, or, while it
stays open (a terminal, ``tail -f``), within a second of the refusal, the summary then saying
"refused as above".

With ``--transactional-id ID`` the records are sent in transactions: one for the whole input, or
one per ``--transaction-records N`` records. The transactional id is registered (InitProducerId)
before any line is read, so a server that refuses it says so in one line. A transaction is
committed once all its records are acknowledged; on an error or an interrupt the open one is
aborted (none of its records is visible to read_committed consumers), the transactions committed
before stay.

Exit status: 0 when every record was acknowledged; 1 when the server refused a record or the
request, or a line was refused (no key separator, too long); 3 when the server could not be
reached, or records were given up after ``--delivery-timeout-ms``; 130 for an interrupt.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from tqdm import tqdm

from stratalog.client import (
    Client,
    Producer,
    RequestTimeoutError,
    SendManyFuture,
    StratalogError,
    TransactionState,
    UnknownTopicOrPartitionError,
)
from stratalog.client.errors import BrokerUnavailableError
from stratalog.records import Compression, Header

from .connection import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    add_target_argument,
    connect,
    fail,
    run_client_command,
)
from .line_reader import LineReader, LineTooLongError
from .partitions import add_partition_argument

__all__ = ["LINE_BYTES_MAX", "add_parser", "run"]

#: The longest line taken: past it the command stops with an error naming the line (a record
#: this large is refused by any server anyway: one batch may not decompress past 64 MiB).
LINE_BYTES_MAX = 64 << 20
# At most this many records wait for their acknowledgements before reading goes on (the
# Producer's buffer bounds their bytes; this bounds the futures held). Counted in records, not
# send_many() calls: input arrives in pieces of any size, and a bound on calls made of small
# pieces left the pipeline waiting on round trips on a loaded machine.
_RECORDS_IN_FLIGHT = 160_000
# Records unacknowledged this long make the command say so, then again every _STALL_REPEAT_S.
_STALL_NOTICE_S = 2.0
_STALL_REPEAT_S = 5.0
# The first DescribeTopic, asked before any line is read: how long to wait for an answer.
_REACH_TIMEOUT_S = 10.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("produce", help="append lines from stdin or a file to a topic")
    parser.add_argument("topic")
    parser.add_argument("--file", metavar="PATH", help="read lines from PATH instead of stdin")
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value; a line "
                             "without SEP is an error (exit 1) naming it")
    parser.add_argument("--allow-keyless-lines", action="store_true",
                        help="with --key-separator: send a line without SEP as a record "
                             "without a key (Kafka's ignore.error=true)")
    parser.add_argument("--empty-as-null", action="store_true",
                        help="send an empty value as a null value: a tombstone (kcat -Z)")
    parser.add_argument("--header", "-H", action="append", default=[], metavar="KEY=VALUE",
                        dest="headers",
                        help="put this header on every record (repeatable, in order; a key "
                             "may repeat; kcat -H)")
    add_partition_argument(parser, repeatable=False,
                           help="send every record to this partition (one; given twice is a "
                                "usage error)")
    parser.add_argument("--compression", default="none",
                        choices=[c.name.lower() for c in Compression],
                        help="batch compression codec (default none)")
    parser.add_argument("--linger-ms", type=int, default=5,
                        help="how long a batch waits for more records (default 5)")
    parser.add_argument("--delivery-timeout-ms", type=int, default=30_000, metavar="MS",
                        help="give up on a record, a commit or an abort after MS milliseconds "
                             "of retrying (default 30000; the library's default is Kafka's "
                             "120000); a server that does not answer at the start ends the "
                             "command at once")
    parser.add_argument("--acks", choices=["all", "1", "0"], default="all",
                        help="which replicas must have a record before it counts as sent "
                             "(Kafka's acks): all in-sync replicas (default), the partition's "
                             "leader (1), or no wait for replication (0); below all, "
                             "idempotence is off, as in Kafka")
    parser.add_argument("--no-idempotence", action="store_true",
                        help="send without producer ids and sequences (at least once: a retry "
                             "may store a batch twice)")
    parser.add_argument("--transactional-id", metavar="ID",
                        help="send in transactions under this transactional id")
    parser.add_argument("--transaction-records", type=int, metavar="N",
                        help="with --transactional-id: commit every N records (default: one "
                             "transaction for the whole input)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar (default: for files, when stderr is a tty)")
    add_target_argument(parser)
    parser.set_defaults(run=run)


class BadLineError(Exception):
    """A line of input the options refuse (no key separator, too long): the message names it
    by number."""


@dataclass(frozen=True)
class LineFormat:
    """How a line becomes a record: ``separator`` splits key from value (``None``: no key);
    ``keyless_ok`` lets a line without it through without a key; ``empty_as_null`` makes an
    empty value null."""

    separator: bytes | None
    keyless_ok: bool
    empty_as_null: bool

    def records(
        self, lines: list[bytes], first_number: int
    ) -> tuple[list[bytes | None] | None, list[bytes | None], BadLineError | None]:
        """(keys, or ``None`` without a separator; values; the error of the first refused
        line, or ``None``) of ``lines``, the first of which is line ``first_number``; the
        records stop before a refused line. O(lines)."""
        separator = self.separator
        values: list[bytes | None]
        if separator is None:
            values = list(lines)
            keys = None
        else:
            keys, values = [], []
            for index, line in enumerate(lines):
                key, found, value = line.partition(separator)
                if not found:
                    if not self.keyless_ok:
                        return keys, self._nulls(values), BadLineError(
                            f"line {first_number + index} has no key separator "
                            f"{separator.decode(errors='replace')!r}: {_shown(line)} "
                            "(--allow-keyless-lines sends such lines without a key)"
                        )
                    key, value = None, line
                keys.append(key)
                values.append(value)
        return keys, self._nulls(values), None

    def _nulls(self, values: list[bytes | None]) -> list[bytes | None]:
        return [value or None for value in values] if self.empty_as_null else values


def _shown(line: bytes, limit: int = 60) -> str:
    text = line[:limit].decode(errors="replace")
    return repr(text) + (" ..." if len(line) > limit else "")


def _parse_header(text: str) -> Header:
    """``KEY=VALUE`` as a header; ``ValueError`` naming the option if there is no ``=`` or
    no key. The value is the argument's bytes (UTF-8, or what the shell gave)."""
    key, found, value = text.partition("=")
    if not found or not key:
        raise ValueError(f"--header takes KEY=VALUE (KEY= for an empty value), got {text!r}")
    try:
        key.encode("utf-8")  # a header key is a Kafka string: UTF-8
    except UnicodeEncodeError:
        raise ValueError(f"--header {text!r}: the key is not UTF-8") from None
    return key, os.fsencode(value)


def run(args: argparse.Namespace) -> int:
    if args.key_separator == "":
        return fail("produce", "--key-separator must not be empty")
    if args.allow_keyless_lines and args.key_separator is None:
        return fail("produce", "--allow-keyless-lines needs --key-separator")
    try:
        headers = [_parse_header(text) for text in args.headers]
    except ValueError as exc:
        return fail("produce", str(exc))
    if args.transactional_id is not None and args.no_idempotence:
        return fail("produce", "--transactional-id needs idempotence: drop --no-idempotence")
    if args.transactional_id is not None and args.acks != "all":
        return fail("produce", f"--transactional-id needs --acks all, got --acks {args.acks}")
    if args.transactional_id == "":
        return fail("produce", "--transactional-id must not be empty")
    if args.transaction_records is not None:
        if args.transactional_id is None:
            return fail("produce", "--transaction-records needs --transactional-id")
        if args.transaction_records < 1:
            return fail("produce",
                        f"--transaction-records must be >= 1, got {args.transaction_records}")
    if args.delivery_timeout_ms < 1:
        return fail("produce", f"--delivery-timeout-ms must be >= 1, got {args.delivery_timeout_ms}")
    line_format = LineFormat(
        args.key_separator.encode() if args.key_separator is not None else None,
        args.allow_keyless_lines, args.empty_as_null,
    )
    if args.file is not None:
        try:
            fd = os.open(args.file, os.O_RDONLY)
        except OSError as exc:
            return fail("produce", f"cannot read {args.file}: {exc.strerror}", EXIT_REFUSED)
        total_bytes: int | None = os.fstat(fd).st_size
    else:
        fd, total_bytes = sys.stdin.fileno(), None
    show_progress = (
        args.progress if args.progress is not None
        else args.file is not None and sys.stderr.isatty()
    )
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, disable=not show_progress,
               file=sys.stderr, desc=args.topic)
    _show_producer_warnings()
    reader = LineReader(fd, line_bytes_max=LINE_BYTES_MAX)
    try:
        if args.transactional_id is not None:
            return _produce_transactionally(args, reader, line_format, headers, bar)
        return _produce(args, reader, line_format, headers, bar)
    finally:
        bar.close()
        if args.file is not None:
            os.close(fd)


async def _chunks(
    reader: LineReader, line_format: LineFormat, bar: tqdm
) -> AsyncIterator[tuple[list[bytes | None] | None, list[bytes | None]]]:
    """(keys or None, values) of the lines as they arrive; raises :class:`BadLineError` after
    the records before a refused line."""
    reader.start()
    try:
        while True:
            try:
                lines = await reader.next_lines()
            except LineTooLongError as exc:
                raise BadLineError(str(exc)) from None
            except OSError as exc:
                raise BadLineError(f"reading the input failed: {exc.strerror}") from None
            if lines is None:
                bar.close()  # before the summary line (close() is idempotent)
                return
            bar.update(reader.bytes_read - bar.n)
            keys, values, error = line_format.records(lines, reader.lines_read - len(lines) + 1)
            if values:
                yield keys, values
            if error is not None:
                raise error
    finally:
        reader.close()


class _FirstWarningOnly(logging.Filter):
    """Lets one WARNING of the Producer through, then none until :meth:`reopen` (the watcher
    calls it once every record sent before that warning is settled), and nothing at ERROR: a
    Producer that failed for good fails the command's records or calls, whose error the
    command prints itself."""

    def __init__(self) -> None:
        super().__init__()
        #: time.monotonic() when the last warning was let through; None: open.
        self.quiet_since: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or self.quiet_since is not None:
            return False
        self.quiet_since = time.monotonic()
        return True

    def reopen(self) -> None:
        self.quiet_since = None


_producer_warnings = _FirstWarningOnly()


def _show_producer_warnings() -> None:
    """The Producer logs the first failure of a request at WARNING (then retries until the
    delivery timeout): a user whose server stopped sees that at once on stderr, and then the
    countdown of :func:`_watch_acknowledgements`, instead of a silent wait."""
    producer_log = logging.getLogger("stratalog.client")
    _producer_warnings.reopen()
    if not any(_producer_warnings in h.filters for h in producer_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("stratalog produce: %(message)s"))
        handler.setLevel(logging.WARNING)
        handler.addFilter(_producer_warnings)
        producer_log.addHandler(handler)
        if producer_log.level == logging.NOTSET or producer_log.level > logging.WARNING:
            producer_log.setLevel(logging.WARNING)


def _producer(args: argparse.Namespace, client: Client) -> Producer:
    return Producer(
        client, linger_ms=args.linger_ms, compression=args.compression,
        delivery_timeout_ms=args.delivery_timeout_ms,
        # A commit or abort, too, is given up after the delivery timeout (the library's
        # default is 60 s), so that a stopped server ends the command within it.
        max_block_ms=args.delivery_timeout_ms,
        acks=args.acks,
        # Unset: on for acks=all, off below (Kafka's rule, the Producer's default).
        idempotent=False if args.no_idempotence else None,
        transactional_id=args.transactional_id,
    )


async def _reach(client: Client, args: argparse.Namespace) -> int:
    """Ask the server for the topic once, before any line is read: 0 if it answered, else
    the exit code after one line saying why (no server answering: 3; the topic unknown or the
    request refused: 1). The Producer would retry a server that is not there until the
    delivery timeout; a user who typed a wrong port wants to know now, as ``consume`` says."""
    timeout_s = min(_REACH_TIMEOUT_S, args.delivery_timeout_ms / 1000)
    try:
        try:
            await client.describe_topic(args.topic, timeout_s=timeout_s)
        except UnknownTopicOrPartitionError:
            # As the Producer's first send would: a server with auto_create_topics_enable
            # creates it for a caller that may (Kafka's auto.create.topics.enable), or
            # refuses again.
            await client.metadata([args.topic], allow_auto_topic_creation=True,
                                  timeout_s=timeout_s)
    except (BrokerUnavailableError, RequestTimeoutError) as exc:
        return fail("produce", f"no server answers at {args.target}: {exc.message} (is "
                               "`stratalog serve` running there? --target names another)",
                    EXIT_UNAVAILABLE)
    except StratalogError as exc:
        if exc.retriable:  # a server that answers but is not ready: the Producer retries it
            return 0
        return fail("produce", _error_text(exc), EXIT_REFUSED)
    return 0


@dataclass
class _Sent:
    """One send_many() call: its future, how many records, when (time.monotonic())."""

    future: SendManyFuture
    count: int
    sent_at: float


async def _watch_acknowledgements(
    pending: collections.deque[_Sent], delivery_timeout_s: float,
    each_second: Callable[[], None] | None = None,
) -> None:
    """While records wait more than :data:`_STALL_NOTICE_S` for their acknowledgement, say so
    every :data:`_STALL_REPEAT_S` with a countdown to the delivery timeout, which gives them
    up; then say whether they were acknowledged or given up (and why). The Producer's own
    warnings stay quiet from the first until a check finds no stall. ``each_second`` is
    called once a second too. Runs until cancelled; reads ``pending`` only between its awaits
    (event-loop only)."""
    stalled: _Sent | None = None  # the oldest call waiting at the last countdown line
    next_report = 0.0
    while True:
        await asyncio.sleep(1.0)
        if each_second is not None:
            each_second()
        now = time.monotonic()
        if stalled is not None and stalled.future.done():
            try:
                stalled.future.result()
            except StratalogError as exc:
                print(f"stratalog produce: gave up on {stalled.count} records: "
                      f"{_error_text(exc)}", file=sys.stderr)
            else:
                print("stratalog produce: the server acknowledges records again",
                      file=sys.stderr)
            stalled = None
            next_report = 0.0
        oldest = next((sent for sent in pending if not sent.future.done()), None)
        quiet_since = _producer_warnings.quiet_since
        if stalled is None and quiet_since is not None and (
            oldest is None or oldest.sent_at > quiet_since
        ):
            _producer_warnings.reopen()  # what was waiting at the warning is settled
        if oldest is None or now - oldest.sent_at < _STALL_NOTICE_S:
            continue
        if now >= next_report:
            stalled_s = now - oldest.sent_at
            records = sum(sent.count for sent in pending if not sent.future.done())
            left_s = max(0.0, delivery_timeout_s - stalled_s)
            print(f"stratalog produce: {records} records not acknowledged for "
                  f"{stalled_s:.0f} s; still trying, giving up on them in {left_s:.0f} s "
                  "(--delivery-timeout-ms)", file=sys.stderr)
            stalled = oldest
            next_report = now + _STALL_REPEAT_S


def _error_text(exc: StratalogError) -> str:
    return f"{exc.message} [{exc.reason}]" if exc.reason else exc.message


def _refusal(sent: _Sent) -> StratalogError | None:
    """The error a settled send ended with, if the server refused it (not a server that did
    not answer: the countdown of :func:`_watch_acknowledgements` reports those)."""
    if not sent.future.done():
        return None
    try:
        sent.future.result()
    except (BrokerUnavailableError, RequestTimeoutError, asyncio.CancelledError):
        return None
    except StratalogError as exc:
        return exc
    return None


def _produce(
    args: argparse.Namespace, reader: LineReader, line_format: LineFormat,
    headers: list[Header], bar: tqdm,
) -> int:
    counts = {"acked": 0, "failed": 0}
    first_error: list[StratalogError] = []
    # The refusal printed while the input was still open: the summary does not repeat it.
    reported: list[StratalogError] = []
    input_open = [True]  # until the last line was read: then the summary comes at once

    def report_refusal() -> None:
        """Input that stays open (a terminal, ``tail -f``) would show a refusal only when it
        ends, and never at Ctrl-C (issue 25: a user without WRITE saw nothing): print the
        first one a second after it comes, once."""
        if reported or not input_open[0]:
            return
        refusals = (_refusal(sent) for sent in pending_sends)
        exc = first_error[0] if first_error else next((e for e in refusals if e), None)
        if exc is not None and not isinstance(exc, BrokerUnavailableError | RequestTimeoutError):
            print(f"stratalog produce: {_error_text(exc)}", file=sys.stderr)
            reported.append(exc)

    pending_sends: collections.deque[_Sent] = collections.deque()

    in_flight = [0]  # records in pending

    async def settle(pending: collections.deque[_Sent]) -> None:
        sent = pending.popleft()
        in_flight[0] -= sent.count
        try:
            counts["acked"] += len(await sent.future)
        except StratalogError as exc:
            counts["failed"] += sent.count
            if not first_error:
                first_error.append(exc)

    async def body() -> int:
        try:
            return await send_all()
        except StratalogError as exc:
            # The Producer, failed for good, refuses the next send with the error printed.
            if reported and _error_text(exc) == _error_text(reported[0]):
                return EXIT_REFUSED
            raise

    async def send_all() -> int:
        started = time.monotonic()
        pending = pending_sends
        bad_line: BadLineError | None = None
        async with connect(args) as client:
            if code := await _reach(client, args):
                return code
            async with _producer(args, client) as producer:
                watcher = asyncio.create_task(
                    _watch_acknowledgements(pending, args.delivery_timeout_ms / 1000,
                                            report_refusal)
                )
                try:
                    async for keys, values in _chunks(reader, line_format, bar):
                        future = await producer.send_many(
                            args.topic, values, keys, partition=args.partition,
                            headers=headers,
                        )
                        pending.append(_Sent(future, len(values), time.monotonic()))
                        in_flight[0] += len(values)
                        while pending and (pending[0].future.done()
                                           or in_flight[0] > _RECORDS_IN_FLIGHT):
                            await settle(pending)
                except BadLineError as exc:
                    bad_line = exc
                finally:
                    input_open[0] = False
                await producer.flush()
                while pending:
                    await settle(pending)
                watcher.cancel()
        elapsed = time.monotonic() - started
        failure = ""
        if first_error:
            exc = first_error[0]
            failure = f"; {counts['failed']} failed: {_error_text(exc)}"
            if reported and _error_text(exc) == _error_text(reported[0]):
                failure = f"; {counts['failed']} failed, refused as above"
        print(f"produced {counts['acked']} records to {args.topic} in {elapsed:.2f} s{failure}",
              file=sys.stderr)
        if bad_line is not None:
            return fail("produce", f"stopped: {bad_line}", EXIT_REFUSED)
        if first_error:
            unanswered = isinstance(first_error[0], BrokerUnavailableError | RequestTimeoutError)
            return EXIT_UNAVAILABLE if unanswered else EXIT_REFUSED
        return 0

    return run_client_command("produce", body)


async def _forget_settled(pending: collections.deque[_Sent], in_flight: list[int]) -> None:
    """Drop the settled calls from the left of ``pending`` (``in_flight[0]``: their records);
    past :data:`_RECORDS_IN_FLIGHT` records, wait for the oldest first. A transactional
    producer's failures come back from the next send or the commit, so they are not looked at
    here."""
    while pending and (pending[0].future.done() or in_flight[0] > _RECORDS_IN_FLIGHT):
        with contextlib.suppress(StratalogError):
            await pending[0].future
        in_flight[0] -= pending.popleft().count


def _produce_transactionally(
    args: argparse.Namespace, reader: LineReader, line_format: LineFormat,
    headers: list[Header], bar: tqdm,
) -> int:
    """Send the input in transactions of ``--transaction-records`` records (or one); abort the
    open one on any error or interrupt and say how many records were committed before."""
    per_transaction = args.transaction_records
    committed = {"records": 0, "transactions": 0}
    began = [False]  # whether a transaction was begun: only then is there an aftermath to tell
    aftermath: list[str] = []  # what became of the open transaction after an error

    async def body() -> int:
        started = time.monotonic()
        async with connect(args) as client:
            if code := await _reach(client, args):
                return code
            async with _producer(args, client) as producer:
                try:
                    await producer.init_transactions()
                except StratalogError as exc:
                    if exc.retriable:
                        raise  # no answer: exit 3 (run_client_command)
                    return fail("produce", f"--transactional-id {args.transactional_id}: the "
                                           f"server refuses it: {_error_text(exc)}",
                                EXIT_REFUSED)
                in_transaction = 0  # records sent in the open transaction
                # The calls not yet acknowledged, for the countdown (errors come at commit).
                pending: collections.deque[_Sent] = collections.deque()
                in_flight = [0]
                watcher = asyncio.create_task(
                    _watch_acknowledgements(pending, args.delivery_timeout_ms / 1000)
                )
                try:
                    await producer.begin_transaction()
                    began[0] = True
                    async for keys, values in _chunks(reader, line_format, bar):
                        start = 0
                        while start < len(values):
                            room = len(values) - start
                            if per_transaction is not None:
                                room = min(room, per_transaction - in_transaction)
                            end = start + room
                            future = await producer.send_many(
                                args.topic, values[start:end],
                                keys[start:end] if keys is not None else None,
                                partition=args.partition, headers=headers,
                            )
                            pending.append(_Sent(future, room, time.monotonic()))
                            in_flight[0] += room
                            await _forget_settled(pending, in_flight)
                            in_transaction += room
                            start = end
                            if per_transaction is not None and in_transaction == per_transaction:
                                await producer.commit_transaction()
                                committed["records"] += in_transaction
                                committed["transactions"] += 1
                                in_transaction = 0
                                await producer.begin_transaction()
                    if in_transaction:
                        await producer.commit_transaction()
                        committed["records"] += in_transaction
                        committed["transactions"] += 1
                    else:
                        await producer.abort_transaction()  # an empty one: nothing to commit
                except BadLineError as exc:
                    aftermath.append(await _abort(producer, exc))
                    return fail("produce", f"stopped: {exc}", EXIT_REFUSED)
                except BaseException as exc:
                    aftermath.append(await _abort(producer, exc))
                    raise
                finally:
                    watcher.cancel()
        elapsed = time.monotonic() - started
        print(f"produced {committed['records']} records to {args.topic} in "
              f"{committed['transactions']} transactions in {elapsed:.2f} s", file=sys.stderr)
        return 0

    code = run_client_command("produce", body)
    if code != 0 and began[0]:
        what = "interrupted" if code == EXIT_INTERRUPTED else "stopped"
        if not aftermath:  # a second interrupt during the abort
            aftermath.append("the open transaction is left to time out on the server")
        print(f"stratalog produce: {what}: {aftermath[0]}; {committed['records']} records in "
              f"{committed['transactions']} transactions were committed before",
              file=sys.stderr)
    return code


async def _abort(producer: Producer, exc: BaseException) -> str:
    """Abort the open transaction after ``exc`` if there is one; say what became of it."""
    state = producer.transaction_state
    if state is TransactionState.COMMITTING:
        return "the last commit was not confirmed: its transaction may be committed or not"
    if state is TransactionState.FATAL_ERROR:
        return "the producer was fenced or failed for good: its open transaction is aborted " \
               "by the server"
    if state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
        return "no transaction was open"
    try:
        await producer.abort_transaction()
    except Exception as abort_error:
        exc.add_note(f"abort_transaction() failed too: {abort_error}")
        return (f"aborting the open transaction failed ({abort_error}): the server aborts it "
                f"after its timeout")
    return "the open transaction was aborted"
