"""``stratalog produce TOPIC``: append lines from stdin or a file, one record per line.

Each line (without its line ending) is a record value; with ``--key-separator SEP`` the text
before the first SEP is the key. Records go through the client's batching ``Producer``
(partitioned by key like a Kafka producer, sticky for unkeyed lines, or all to ``--partition``),
acknowledged by every in-sync replica unless ``--acks 1`` or ``--acks 0`` (Kafka's acks),
idempotent unless ``--no-idempotence`` or acks below all. A file shows a progress bar on stderr when stderr is a
terminal. The summary line on stderr says how many records were acknowledged; the exit status is
1 if any record failed.

With ``--transactional-id ID`` the records are sent in transactions: one for the whole input, or
one per ``--transaction-records N`` records. A transaction is committed once all its records
are acknowledged; on an error or an interrupt the open one is aborted (none of its records is
visible to read_committed consumers), the transactions committed before stay, and the exit status
is non-zero (1, 3 when the server could not be reached, 130 for an interrupt).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from tqdm import tqdm

from stratalog.client import Producer, StratalogError, TransactionState
from stratalog.records import Compression

from .connection import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    add_target_argument,
    connection_options,
    fail,
    run_client_command,
)
from .partitions import add_partition_argument

__all__ = ["add_parser", "run"]

# Lines are sent in chunks through send_many (one call per chunk, not per line); at most
# _CHUNKS_IN_FLIGHT chunks wait for their acknowledgements before reading goes on.
_CHUNK_LINES = 10_000
_CHUNKS_IN_FLIGHT = 16


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("produce", help="append lines from stdin or a file to a topic")
    parser.add_argument("topic")
    parser.add_argument("--file", metavar="PATH", help="read lines from PATH instead of stdin")
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value")
    add_partition_argument(parser, repeatable=False,
                           help="send every record to this partition (one; given twice is a "
                                "usage error)")
    parser.add_argument("--compression", default="none",
                        choices=[c.name.lower() for c in Compression],
                        help="batch compression codec (default none)")
    parser.add_argument("--linger-ms", type=int, default=5,
                        help="how long a batch waits for more records (default 5)")
    parser.add_argument("--delivery-timeout-ms", type=int, default=30_000, metavar="MS",
                        help="give up on a record (and on reaching the server at all) after MS "
                             "milliseconds of retrying (default 30000; the library's default "
                             "is Kafka's 120000)")
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


def _split(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        return None, line  # no separator on this line: a record without a key
    return key, value


def run(args: argparse.Namespace) -> int:
    if args.key_separator == "":
        return fail("produce", "--key-separator must not be empty")
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
    _show_producer_warnings()
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if args.file is not None:
        try:
            source: BinaryIO = open(args.file, "rb")  # noqa: SIM115 - closed in finally below
        except OSError as exc:
            return fail("produce", f"cannot read {args.file}: {exc.strerror}", EXIT_REFUSED)
        total_bytes = os.fstat(source.fileno()).st_size
    else:
        source, total_bytes = sys.stdin.buffer, None
    show_progress = (
        args.progress if args.progress is not None
        else args.file is not None and sys.stderr.isatty()
    )
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, disable=not show_progress,
               file=sys.stderr, desc=args.topic)
    try:
        chunks = _chunks(args, source, separator, bar)
        if args.transactional_id is not None:
            return _produce_transactionally(args, chunks)
        return _produce(args, chunks)
    finally:
        bar.close()
        if args.file is not None:
            source.close()


def _chunks(
    args: argparse.Namespace, source: BinaryIO, separator: bytes | None, bar: tqdm
) -> Iterator[tuple[list[bytes | None] | None, list[bytes]]]:
    """(keys or None, values) of the next lines, a chunk at a time."""
    # Someone typing lines wants each sent at once; a pipe is read in chunks.
    chunk_lines = 1 if args.file is None and sys.stdin.isatty() else _CHUNK_LINES
    while True:
        lines = source.readlines(_CHUNK_LINES * 128) if args.file else [
            line for _, line in zip(range(chunk_lines), source, strict=False)
        ]
        if not lines:
            return
        bar.update(sum(map(len, lines)))
        keys: list[bytes | None] = []
        values: list[bytes] = []
        for raw in lines:
            key, value = _split(raw.rstrip(b"\r\n"), separator)
            keys.append(key)
            values.append(value)
        yield (keys if separator is not None else None), values


def _show_producer_warnings() -> None:
    """The Producer logs its first failure of a request at WARNING (then retries until the
    delivery timeout): a user whose server is down sees that at once on stderr, instead of a
    silent wait."""
    producer_log = logging.getLogger("stratalog.client")
    if not any(isinstance(h, logging.StreamHandler) for h in producer_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("stratalog produce: %(message)s"))
        handler.setLevel(logging.WARNING)
        producer_log.addHandler(handler)
        if producer_log.level == logging.NOTSET or producer_log.level > logging.WARNING:
            producer_log.setLevel(logging.WARNING)


def _producer(args: argparse.Namespace) -> Producer:
    return Producer(
        args.target, linger_ms=args.linger_ms, compression=args.compression,
        delivery_timeout_ms=args.delivery_timeout_ms,
        acks=args.acks,
        # Unset: on for acks=all, off below (Kafka's rule, the Producer's default).
        idempotent=False if args.no_idempotence else None,
        transactional_id=args.transactional_id,
        **connection_options(args),
    )


def _produce(
    args: argparse.Namespace, chunks: Iterator[tuple[list[bytes | None] | None, list[bytes]]]
) -> int:
    counts = {"acked": 0, "failed": 0}
    first_error: list[str] = []

    async def settle(pending: collections.deque) -> None:
        future, count = pending.popleft()
        try:
            counts["acked"] += len(await future)
        except StratalogError as exc:
            counts["failed"] += count
            if not first_error:
                first_error.append(f"{exc.message} [{exc.reason}]")

    async def body() -> int:
        started = time.monotonic()
        pending: collections.deque = collections.deque()
        async with _producer(args) as producer:
            for keys, values in chunks:
                future = await producer.send_many(
                    args.topic, values, keys, partition=args.partition
                )
                pending.append((future, len(values)))
                while len(pending) > _CHUNKS_IN_FLIGHT:
                    await settle(pending)
            await producer.flush()
            while pending:
                await settle(pending)
        elapsed = time.monotonic() - started
        print(f"produced {counts['acked']} records to {args.topic} in {elapsed:.2f} s"
              + (f"; {counts['failed']} failed: {first_error[0]}" if counts["failed"] else ""),
              file=sys.stderr)
        return EXIT_REFUSED if counts["failed"] else 0

    return run_client_command("produce", body)


def _produce_transactionally(
    args: argparse.Namespace, chunks: Iterator[tuple[list[bytes | None] | None, list[bytes]]]
) -> int:
    """Send the input in transactions of ``--transaction-records`` records (or one); abort the
    open one on any error or interrupt and say how many records were committed before."""
    per_transaction = args.transaction_records
    committed = {"records": 0, "transactions": 0}
    aftermath: list[str] = []  # what became of the open transaction after an error

    async def body() -> int:
        started = time.monotonic()
        async with _producer(args) as producer:
            in_transaction = 0  # records sent in the open transaction
            try:
                await producer.begin_transaction()
                for keys, values in chunks:
                    start = 0
                    while start < len(values):
                        room = len(values) - start
                        if per_transaction is not None:
                            room = min(room, per_transaction - in_transaction)
                        end = start + room
                        await producer.send_many(
                            args.topic, values[start:end],
                            keys[start:end] if keys is not None else None,
                            partition=args.partition,
                        )
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
            except BaseException as exc:
                aftermath.append(await _abort(producer, exc))
                raise
        elapsed = time.monotonic() - started
        print(f"produced {committed['records']} records to {args.topic} in "
              f"{committed['transactions']} transactions in {elapsed:.2f} s", file=sys.stderr)
        return 0

    code = run_client_command("produce", body)
    if code != 0:
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
