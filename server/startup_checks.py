"""What the server checks before it starts, so that a start fails at once, naming the cause:
the listen ports are free (a port someone chose must be; a default one may give way), the open
files limit is raised to the hard one, and a bind that failed for want of a descriptor says so.

Blocking, start-up only (no event loop needed); the composition root (app.py) calls them.
"""

from __future__ import annotations

import errno
import logging
import os
import socket

from stratalog.server.settings import Settings, parse_address

__all__ = ["StartupError", "check_ports_free", "out_of_descriptors", "raise_open_files_limit"]

logger = logging.getLogger("stratalog.server.app")  # the start's lines, as the server logs them


class StartupError(Exception):
    """The server could not start: a log dir is locked or broken, the transaction state log
    does not load, or the address is taken."""


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (the storage budgets descriptors
    within it: server/storage/descriptor_budget.py), log both; returns the limit in force."""
    from stratalog.server.storage.descriptor_budget import raise_open_files_limit as raise_it

    before, after = raise_it()
    if after != before:
        logger.info("open files limit (RLIMIT_NOFILE) raised from %d to %d, the hard limit",
                    before, after)
    else:
        logger.info("open files limit (RLIMIT_NOFILE) %d", after)
    return after


def check_ports_free(settings: Settings) -> None:
    """Raise StartupError when the listen port (or the metrics port) is already taken.

    A bind test on each address the host resolves to, with SO_REUSEADDR as gRPC binds (a port
    whose last connections linger in TIME_WAIT is free), closed at once. Port 0 (any free one)
    is not tested. Another process may still take the port between this test and the real
    bind; that bind then fails with its own StartupError.
    """
    address = settings.listen_address
    ports = [(address.host, address.port, "")]
    # A default metrics port that is taken gives way to a free one (Server.start): only a
    # port someone chose must be free.
    if settings.metrics_port > 0 and settings.given("metrics_port"):
        ports.append((settings.metrics_listen_host, settings.metrics_port, " (the metrics port)"))
    if settings.kafka_listen and settings.given("kafka_listen"):
        kafka = parse_address(settings.kafka_listen)
        ports.append((kafka.host, kafka.port, " (the Kafka port, kafka_listen)"))
    for host, port, what in ports:
        if port == 0:
            continue
        try:
            resolved = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                          flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise StartupError(f"cannot listen on {host}:{port}{what}: {exc.strerror}") from exc
        for family, kind, proto, _, sockaddr in resolved:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    probe.bind(sockaddr)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise StartupError(
                            f"port {port}{what} is already in use on {host}"
                        ) from exc
                    # Anything else (an address this host lacks, a privileged port) is for
                    # the real bind to report.


def out_of_descriptors() -> str | None:
    """"Too many open files ..." when the process has no descriptor left (EMFILE), else None."""
    from stratalog.server.storage.descriptor_budget import read_open_files_limit

    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            return None
        return (
            f"Too many open files: the process holds all {read_open_files_limit()[0]:,} "
            "descriptors of its RLIMIT_NOFILE; raise it with ulimit -n, or serve fewer "
            "partitions (see log.descriptors.reserved in docs/configuration.md)"
        )
    os.close(fd)
    return None
