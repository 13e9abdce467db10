"""``stratalog produce TOPIC``: append lines from stdin or a file, one record per line.

Each line (without its line ending) is a record value; with ``--key-separator SEP`` the text
before the first SEP is the key. Records go through the client's batching ``Producer``
(partitioned by key like a Kafka producer, sticky for unkeyed lines, or all to ``--partition``).
A file shows a progress bar on stderr when stderr is a terminal. The summary line on stderr says
how many records were acknowledged; the exit status is 1 if any record failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from typing import BinaryIO

from tqdm import tqdm

from stratalog.client import Producer, StratalogError
from stratalog.records import Compression

from .connection import EXIT_REFUSED, add_target_argument, fail, run_client_command

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
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--compression", default="none",
                        choices=[c.name.lower() for c in Compression],
                        help="batch compression codec (default none)")
    parser.add_argument("--linger-ms", type=int, default=5,
                        help="how long a batch waits for more records (default 5)")
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
    if args.partition is not None and args.partition < 0:
        return fail("produce", f"--partition must be >= 0, got {args.partition}")
    if args.key_separator == "":
        return fail("produce", "--key-separator must not be empty")
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
    # Someone typing lines wants each sent at once; a pipe is read in chunks.
    chunk_lines = 1 if args.file is None and sys.stdin.isatty() else _CHUNK_LINES
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
        bar = tqdm(total=total_bytes, unit="B", unit_scale=True, disable=not show_progress,
                   file=sys.stderr, desc=args.topic)
        pending: collections.deque = collections.deque()
        try:
            async with Producer(args.target, linger_ms=args.linger_ms,
                                compression=args.compression) as producer:
                while True:
                    lines = source.readlines(_CHUNK_LINES * 128) if args.file else [
                        line for _, line in zip(range(chunk_lines), source, strict=False)
                    ]
                    if not lines:
                        break
                    bar.update(sum(map(len, lines)))
                    keys, values = [], []
                    for raw in lines:
                        key, value = _split(raw.rstrip(b"\r\n"), separator)
                        keys.append(key)
                        values.append(value)
                    future = await producer.send_many(
                        args.topic, values, keys if separator is not None else None,
                        partition=args.partition,
                    )
                    pending.append((future, len(values)))
                    while len(pending) > _CHUNKS_IN_FLIGHT:
                        await settle(pending)
                await producer.flush()
                while pending:
                    await settle(pending)
        finally:
            bar.close()
            if args.file is not None:
                source.close()
        elapsed = time.monotonic() - started
        print(f"produced {counts['acked']} records to {args.topic} in {elapsed:.2f} s"
              + (f"; {counts['failed']} failed: {first_error[0]}" if counts["failed"] else ""),
              file=sys.stderr)
        return EXIT_REFUSED if counts["failed"] else 0

    return run_client_command("produce", body)
