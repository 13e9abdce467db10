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
import sys
from collections.abc import Sequence

from stratalog import __version__

from . import (
    acls,
    bench,
    cluster,
    consume,
    credentials,
    dev_cluster,
    dump_log,
    offsets,
    produce,
    reload,
    serve,
    topics,
    whoami,
)
from .connection import add_connection_arguments, add_target_argument
from .timestamps import join_relative_times

# Subcommand modules, in the order `stratalog --help` lists them.
_COMMANDS = (
    serve, topics, produce, consume, offsets, acls, cluster, dump_log, bench, whoami, credentials,
    dev_cluster,
    reload,
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(join_relative_times(sys.argv[1:] if argv is None else argv))
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `stratalog dump-log ... | head`: the reader went away; that is not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
