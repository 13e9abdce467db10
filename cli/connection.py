"""How the client subcommands reach a server, and how their failures become exit codes.

Every subcommand that talks to a server takes ``--target HOST[:PORT]`` (default: the
``STRATALOG_TARGET`` environment variable, else ``127.0.0.1:50051``, where ``stratalog serve``
listens by default) and the connection's security options, given before the subcommand
(``stratalog --target db1:50051 --tls topics list``) or after it (``stratalog topics list
--target db1:50051 --tls``; after wins), each with an environment variable
(stratalog.client.credentials)::

    --target HOST[:PORT][,...]     STRATALOG_TARGET         port 50051 when left out

    --tls                          STRATALOG_TLS            TLS with the system's roots
    --ca-file PATH                 STRATALOG_TLS_CA_FILE    CA that signed the server (implies TLS)
    --cert-file, --key-file PATH   STRATALOG_TLS_CERT_FILE, STRATALOG_TLS_KEY_FILE   mTLS
    --server-name NAME             STRATALOG_TLS_SERVER_NAME  name to check the certificate for
    --user NAME                    STRATALOG_USER           with --password-file
    --password-file PATH           STRATALOG_PASSWORD_FILE  its first line is the password
    --token-file PATH              STRATALOG_TOKEN_FILE     its first line is the token
    --allow-plaintext-credentials  send the password or token without TLS (loopback, a proxy)

A target is ``HOST``, ``HOST:PORT``, ``[IPV6]:PORT`` or a gRPC name (``dns:///host:port``,
``unix:/path``), or a comma-separated list of them: the bootstrap targets of a cluster
(``--target db1,db2,db3``; Kafka's ``--bootstrap-server``, accepted as an alias), each request going to the server
that leads its partition (stratalog.client.client, "Routing"). An empty entry (``db1,,db2``, a
trailing comma) is a usage error (exit 2) naming it; a gRPC name (``ipv4:a:1,b:2``) is never
split. A URL (``http://host``, ``https://host``) is a usage error (exit 2) that says to
give ``HOST:PORT``, and ``--tls`` for TLS: gRPC would take ``http`` for a host name and dial port
443. Secrets are read from files only: a flag or a variable holding one shows in ``ps``. The
subcommand runs one coroutine through :func:`run_client_command`, which maps errors to exit
codes that scripts can rely on:

    0    success
    1    the server refused the request (unknown topic, offset out of range, invalid config, ...)
    2    bad usage (argparse, or an argument the library rejected before any request)
    3    the server could not be reached or did not answer in time, or the connection's TLS
         set-up is not the server's (the message says which: the server requires TLS or a
         client certificate, refused it, or its certificate is not trusted: pass --ca-file)
    130  interrupted (Ctrl-C)

Messages go to stderr as one line: ``stratalog <command>: <what went wrong>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from stratalog.client import Client
from stratalog.client.credentials import TlsConfig, credentials_from
from stratalog.client.errors import (
    BrokerUnavailableError,
    RequestTimeoutError,
    StratalogError,
    TlsHandshakeError,
)
from stratalog.client.tls_diagnosis import Diagnosis, TlsProblem, message, unknown_issuer

__all__ = [
    "DEFAULT_TARGET",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "add_connection_arguments",
    "add_target_argument",
    "connect",
    "connection_options",
    "fail",
    "parse_target",
    "run_client_command",
    "tls_failure",
]

DEFAULT_PORT = 50051
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_PORT}"
EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130


# gRPC's own name schemes, passed through as they are (grpc/doc/naming.md).
_GRPC_SCHEMES = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def parse_target(text: str) -> str:
    """The gRPC target for ``--target``: ``HOST`` gets port 50051, as ``stratalog serve``.

    Raises:
        argparse.ArgumentTypeError: a URL, an empty host or a port that is not 1-65535 (argparse
            turns it into a usage error, exit 2, naming ``--target``).
    """
    target = text.strip()
    if target.lower().startswith(_GRPC_SCHEMES):
        return target
    if _URL.match(target):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URL: give HOST:PORT (e.g. localhost:{DEFAULT_PORT}), and --tls "
            "to connect with TLS"
        )
    if target.startswith("["):  # [IPv6] or [IPv6]:PORT
        host, bracket, rest = target[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise argparse.ArgumentTypeError(f"{text!r}: expected [IPV6] or [IPV6]:PORT")
        host, port = f"[{host}]", rest[1:] if rest else None
    elif target.count(":") > 1:  # a bare IPv6 address: no port can be told apart
        host, port = f"[{target}]", None
    else:
        host, _, port = target.partition(":")
        port = port if ":" in target else None
    if not host:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST or HOST:PORT")
    if port is None:
        return f"{host}:{DEFAULT_PORT}"
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be 1-65535, got {port!r}")
    return f"{host}:{int(port)}"


def parse_targets(text: str) -> str:
    """``--target``: one target or a comma-separated list, each as :func:`parse_target` makes
    it, joined by commas (what :class:`~stratalog.client.Client` takes).

    Raises:
        argparse.ArgumentTypeError: an empty entry (naming its position), or an entry
            :func:`parse_target` refuses.
    """
    stripped = text.strip()
    if stripped.lower().startswith(_GRPC_SCHEMES):
        return stripped
    entries = stripped.split(",")
    targets = []
    for position, entry in enumerate(entries, start=1):
        if not entry.strip():
            raise argparse.ArgumentTypeError(
                f"{text!r}: entry {position} of the list is empty (a doubled or trailing "
                "comma?); give HOST[:PORT][,HOST[:PORT]...]"
            )
        targets.append(parse_target(entry))
    return ",".join(dict.fromkeys(targets))


def add_target_argument(
    parser: argparse.ArgumentParser, *, global_options: bool = False
) -> None:
    """``--target`` and the security options, on a subcommand that talks to a server (or on
    the top-level parser with ``global_options``: see :func:`add_connection_arguments`)."""
    default: Any = argparse.SUPPRESS
    if global_options:
        default = os.environ.get("STRATALOG_TARGET") or DEFAULT_TARGET
    parser.add_argument(
        "--target",
        "--bootstrap-server",  # Kafka's tools' name for it
        dest="target",
        type=parse_targets,
        default=default,
        metavar="HOST[:PORT][,...]",
        help=f"the server to talk to, or a comma-separated list of a cluster's servers "
             f"(default: $STRATALOG_TARGET or {DEFAULT_TARGET}; port "
             f"{DEFAULT_PORT} when left out; also accepted "
             + ("after" if global_options else "before") + " the subcommand)",
    )
    if not global_options:
        add_connection_arguments(parser, global_options=False)


def add_connection_arguments(
    parser: argparse.ArgumentParser,
    *,
    global_options: bool,
    environ: Mapping[str, str] | None = None,
) -> None:
    """The security options (module docstring). On the top-level parser (``global_options``)
    they default to the environment; on a subcommand they default to nothing at all, so that
    a value given before the subcommand is not overwritten by the subcommand's default."""
    env = os.environ if environ is None else environ
    group = parser.add_argument_group(
        "connection security" + (" (also accepted after the subcommand)" if global_options
                                 else " (also accepted before the subcommand)"))

    def default(variable: str) -> Any:
        return (env.get(variable) or None) if global_options else argparse.SUPPRESS

    tls_default: Any = argparse.SUPPRESS
    if global_options:
        tls_default = env.get("STRATALOG_TLS", "").strip().lower() in ("1", "true", "yes", "on")
    group.add_argument("--tls", action="store_true", default=tls_default,
                       help="connect with TLS, trusting the system's CAs ($STRATALOG_TLS)")
    group.add_argument("--ca-file", metavar="PATH", default=default("STRATALOG_TLS_CA_FILE"),
                       help="PEM CA certificates that signed the server's certificate; implies"
                            " --tls ($STRATALOG_TLS_CA_FILE)")
    group.add_argument("--cert-file", metavar="PATH",
                       default=default("STRATALOG_TLS_CERT_FILE"),
                       help="PEM client certificate for mTLS ($STRATALOG_TLS_CERT_FILE)")
    group.add_argument("--key-file", metavar="PATH", default=default("STRATALOG_TLS_KEY_FILE"),
                       help="PEM key of --cert-file ($STRATALOG_TLS_KEY_FILE)")
    group.add_argument("--server-name", metavar="NAME",
                       default=default("STRATALOG_TLS_SERVER_NAME"),
                       help="name to check the server's certificate against, when it is not"
                            " the target's host ($STRATALOG_TLS_SERVER_NAME)")
    group.add_argument("--user", metavar="NAME", default=default("STRATALOG_USER"),
                       help="user to authenticate as, with --password-file ($STRATALOG_USER)")
    group.add_argument("--password-file", metavar="PATH",
                       default=default("STRATALOG_PASSWORD_FILE"),
                       help="file whose first line is the password ($STRATALOG_PASSWORD_FILE)")
    group.add_argument("--token-file", metavar="PATH", default=default("STRATALOG_TOKEN_FILE"),
                       help="file whose first line is a token from `stratalog credentials add"
                            " --token` ($STRATALOG_TOKEN_FILE)")
    group.add_argument("--allow-plaintext-credentials", action="store_true",
                       default=False if global_options else argparse.SUPPRESS,
                       help="send the password or token even without TLS (only on loopback or"
                            " behind a TLS-terminating proxy: anyone on the path can read it)")


def connection_options(args: argparse.Namespace) -> dict[str, Any]:
    """``tls=`` and ``auth=`` for a Client, a Producer or a Consumer, from the options.

    Raises:
        ValueError: a file that cannot be read, or options that do not go together (the
            command exits 2 with the message).
    """
    ca, cert, key = (getattr(args, n, None) for n in ("ca_file", "cert_file", "key_file"))
    server_name = getattr(args, "server_name", None)
    tls = None
    if getattr(args, "tls", False) or ca or cert or key or server_name:
        tls = TlsConfig.from_files(ca, cert, key, server_name)
    auth = credentials_from(
        getattr(args, "user", None), getattr(args, "password_file", None),
        getattr(args, "token_file", None),
        plaintext_allowed=getattr(args, "allow_plaintext_credentials", False),
    )
    return {"tls": tls, "auth": auth}


def connect(args: argparse.Namespace) -> Client:
    """A :class:`Client` to ``--target`` (one server or a cluster's bootstrap list) with the
    connection's security options."""
    return Client(args.target, **connection_options(args))


def fail(command: str, message: str, code: int = EXIT_USAGE) -> int:
    """Print ``stratalog <command>: <message>`` on stderr and return ``code``."""
    print(f"stratalog {command}: {message}", file=sys.stderr)
    return code


#: What to do about a TLS set-up the server refused, in this command's options (the library's
#: own message names TlsConfig's arguments instead).
_TLS_ADVICE = {
    TlsProblem.SERVER_REQUIRES_TLS:
        "pass --ca-file with the CA that signed its certificate (--tls: the system's CAs)",
    TlsProblem.SERVER_REQUIRES_CLIENT_CERTIFICATE:
        "pass --cert-file and --key-file, a certificate signed by a CA the server trusts",
    TlsProblem.CLIENT_CERTIFICATE_REFUSED:
        "--cert-file is not signed by a CA the server trusts, or it has expired",
    TlsProblem.SERVER_CERTIFICATE_UNTRUSTED: "pass --ca-file with the CA that signed it",
    TlsProblem.SERVER_NAME_MISMATCH: "pass --server-name with the name it is for",
    TlsProblem.SERVER_NOT_TLS: "it listens without TLS: leave out --tls and --ca-file",
}


def tls_failure(exc: TlsHandshakeError) -> str:
    """The command line's words for a TLS set-up the server refused, e.g. ``certificate not
    trusted (unable to get local issuer certificate) at db1:50051: pass --ca-file with the CA
    that signed it``."""
    diagnosis = Diagnosis(exc.problem, exc.detail)
    advice = _TLS_ADVICE[exc.problem]
    if exc.problem is TlsProblem.SERVER_CERTIFICATE_UNTRUSTED and not unknown_issuer(diagnosis):
        advice = "the server needs a valid certificate"
    return message(diagnosis, exc.address, advice)


def run_client_command(command: str, coroutine: Callable[[], Awaitable[int]]) -> int:
    """Run ``coroutine()`` to completion and turn its errors into an exit code."""
    try:
        return asyncio.run(_run(coroutine))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except TlsHandshakeError as exc:
        return fail(command, tls_failure(exc), EXIT_UNAVAILABLE)
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
