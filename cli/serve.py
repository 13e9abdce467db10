"""``stratalog serve``: run the server.

With no arguments it keeps its data in ``./data`` and listens on 127.0.0.1:50051. Every server
setting has a flag (``--listen``, ``--log-dirs``, ``--max-request-bytes`` ...), ``--config``
reads a TOML file, ``--set NAME=VALUE`` sets anything including ``log.*`` storage defaults; the
environment (``STRATALOG_*``) sits between the file and the flags. ``--print-settings`` prints
every effective value and exits without starting. See docs/configuration.md.

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 1 when the server could not start (a
port in use: ``port 50051 is already in use on 127.0.0.1``, checked before the data directory is
created) or stop cleanly, 2 for a bad setting (an unknown name, ``log.*`` ones included, names
the closest known one).
"""

from __future__ import annotations

import argparse
import sys

from stratalog.server.settings import (
    SettingsError,
    add_arguments,
    describe,
    settings_from_args,
)

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the server (data in ./data, 127.0.0.1:50051 unless configured)",
        description="Run the stratalog gRPC server until SIGTERM or SIGINT. Settings come from "
        "the defaults, a TOML file (--config or $STRATALOG_CONFIG), STRATALOG_* environment "
        "variables and these flags, in increasing precedence.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"stratalog serve: {exc}", file=sys.stderr)
        return 2
    if args.print_settings:
        print("\n".join(describe(settings)))
        return 0
    # Imported here so that other subcommands do not pay for grpc and the engine.
    from stratalog.server.app import run as run_server

    return run_server(settings)
