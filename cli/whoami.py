"""``stratalog whoami``: who the server takes this client for (the WhoAmI RPC).

Prints the principal, how it was authenticated and the client address the server sees, as one
line for people or one JSON document with ``--format json``::

    User:alice (password) from 127.0.0.1

Useful to check a TLS, mTLS, password or token setup before anything else: a certificate's
subject shows as ``User:CN=client-1,O=example (tls)``, no credentials as
``User:ANONYMOUS (none)`` (WhoAmI answers even where anonymous calls are refused).
"""

from __future__ import annotations

import argparse
import json

from .connection import add_target_argument, connect, run_client_command
from .output_format import add_format_argument, wants_json

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "whoami",
        help="the principal the server authenticates this client as",
        description="Ask the server who it takes this client for: principal, how it was"
                    " authenticated (none, tls, password, token) and the client's address.",
    )
    add_target_argument(parser)
    add_format_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    async def body() -> int:
        async with connect(args) as client:
            me = await client.who_am_i()
        if wants_json(args):
            print(json.dumps(me._asdict()))
        else:
            print(f"{me.principal} ({me.authenticated_by}) from {me.host}")
        return 0

    return run_client_command("whoami", body)
