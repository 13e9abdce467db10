"""The ``stratalog`` command.

Each subcommand lives in its own module of this package, exposing ``add_parser(subparsers)`` and
``run(args) -> int``. ``main`` parses, dispatches, and turns the project's operating errors into a
one-line message on stderr with a non-zero exit code, so that scripts can rely on:

    0  success
    1  the command ran but found problems (e.g. index mismatches, unreadable files)
    2  bad usage (argparse)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from stratalog import __version__

from . import (
    acls,
    bench,
    cluster,
    consume,
    credentials,
    delete_records,
    dev_cluster,
    dump_log,
    groups,
    offsets,
    produce,
    reload,
    serve,
    topics,
    whoami,
)
from .connection import add_connection_arguments, add_target_argument
from .kafka_habits import chosen_parser, kafka_topics_action, refuse_unknown, resolve_topic
from .timestamps import join_relative_times

# Subcommand modules, in the order `stratalog --help` lists them.
_COMMANDS = (
    serve, topics, produce, consume, groups, offsets, delete_records, acls, cluster, dump_log, bench,
    whoami, credentials, dev_cluster, reload,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stratalog",
        description="A partitioned-log storage server in Apache Kafka's on-disk format.",
    )
    parser.add_argument("--version", action="version", version=f"stratalog {__version__}")
    # The target, TLS and credentials of every subcommand that talks to a server, accepted
    # before the subcommand as well as after it (cli/connection.py).
    add_target_argument(parser, global_options=True)
    add_connection_arguments(parser, global_options=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        module.add_parser(subparsers)
    return parser


class _FinalFailureNotes(logging.Filter):
    """Drops the Producer's WARNINGs that restate a final failure.

    The library logs a batch that failed for good ("record batch not delivered: ...") and a
    transaction that must be aborted, for callers that never await their futures. Every command
    here awaits them and prints the failure in its own words, so these notes only printed the
    same error twice (issue 25: RECORD_TOO_LARGE shown twice by ``produce``). The Producer's
    retry warnings, which say a server is down while the command waits, are kept.
    """

    _RESTATED = ("record batch not delivered: ", "transaction of %r failed, it must be aborted")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self._RESTATED))


_FINAL_FAILURE_NOTES = _FinalFailureNotes()


def main(argv: Sequence[str] | None = None) -> int:
    # One instance: added again by a second main() in one process, it is not added twice.
    logging.getLogger("stratalog.client.producer").addFilter(_FINAL_FAILURE_NOTES)
    parser = build_parser()
    args, extras = parser.parse_known_args(
        kafka_topics_action(join_relative_times(sys.argv[1:] if argv is None else argv)))
    subcommand = chosen_parser(parser, args)
    if extras:
        # The subcommand's usage and what to use instead of a Kafka or kcat flag, where
        # argparse would print the top-level usage and a bare "unrecognized arguments".
        refuse_unknown(subcommand, extras)
    resolve_topic(subcommand, args)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `stratalog dump-log ... | head`: the reader went away; that is not an error of ours.
        # What is left in stdout's buffer would fail again when Python flushes it at exit
        # ("Exception ignored ... BrokenPipeError", exit 120): point stdout at /dev/null.
        _discard_stdout()
        return 0


def _discard_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
