"""How the client subcommands reach a server, and how their failures become exit codes.

Every subcommand that talks to a server takes ``--target HOST:PORT`` (default: the
``STRATALOG_TARGET`` environment variable, else ``127.0.0.1:50051``, where ``stratalog serve``
listens by default) and runs one coroutine through :func:`run_client_command`, which maps errors
to exit codes that scripts can rely on:

    0    success
    1    the server refused the request (unknown topic, offset out of range, invalid config, ...)
    2    bad usage (argparse, or an argument the library rejected before any request)
    3    the server could not be reached or did not answer in time
    130  interrupted (Ctrl-C)

Messages go to stderr as one line: ``stratalog <command>: <what went wrong>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable

from stratalog.client.errors import BrokerUnavailableError, RequestTimeoutError, StratalogError

__all__ = [
    "DEFAULT_TARGET",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "add_target_argument",
    "fail",
    "run_client_command",
]

DEFAULT_TARGET = "127.0.0.1:50051"
EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=os.environ.get("STRATALOG_TARGET", DEFAULT_TARGET),
        metavar="HOST:PORT",
        help=f"the server to talk to (default: $STRATALOG_TARGET or {DEFAULT_TARGET})",
    )


def fail(command: str, message: str, code: int = EXIT_USAGE) -> int:
    """Print ``stratalog <command>: <message>`` on stderr and return ``code``."""
    print(f"stratalog {command}: {message}", file=sys.stderr)
    return code


def run_client_command(command: str, coroutine: Callable[[], Awaitable[int]]) -> int:
    """Run ``coroutine()`` to completion and turn its errors into an exit code."""
    try:
        return asyncio.run(_run(coroutine))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (BrokerUnavailableError, RequestTimeoutError) as exc:
        return fail(command, f"cannot reach the server: {exc.message}", EXIT_UNAVAILABLE)
    except StratalogError as exc:
        reason = f" [{exc.reason}]" if exc.reason else ""
        return fail(command, f"{exc.message}{reason}", EXIT_REFUSED)
    except (TypeError, ValueError) as exc:
        # The library checks arguments before any request and names the bad one.
        return fail(command, str(exc), EXIT_USAGE)


async def _run(coroutine: Callable[[], Awaitable[int]]) -> int:
    return await coroutine()
