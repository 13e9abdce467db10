"""The file descriptors the storage may hold, and the check that keeps it within them.

A process may hold at most ``RLIMIT_NOFILE`` descriptors (``ulimit -n``); past it every
``open``, ``socket`` and ``accept`` fails with EMFILE, and a server that loaded more partitions
than it can hold files for cannot even restart. Kafka keeps every segment's files open and asks
operators to raise the limit; stratalog counts instead::

    RLIMIT_NOFILE (the soft limit, raised to the hard limit at start: raise_open_files_limit)
      ├── connections                     one per connection the server may hold: its
      │                                   max_connections (gRPC) + metrics_connections_max
      │                                   (the metrics endpoint); 0 for an embedded LogManager
      ├── log.descriptors.reserved        listening sockets, pipes, checkpoints, snapshots,
      │                                   the transaction state log: everything else
      ├── 6 per partition                 its active segment, always open (.log, .index and
      │                                   .timeindex with their maps, .txnindex)
      └── the rest, up to 6 × log.open.segments.max
                                          inactive segments whose files the OpenSegments cache
                                          keeps open (open_segments.py); it closes the least
                                          recently used beyond its capacity

Connections come out of the limit first because their number is the clients' choice, up to
the caps: a server whose storage assumed they were few would, once clients opened them all,
fail a segment roll with EMFILE (issue 24: 2,048 idle metrics connections did). With the
caps counted here, every descriptor the storage counts on is one no client can take.

A CreateTopic whose partitions would not fit beside the existing ones is refused before
anything is written (:meth:`DescriptorBudget.check_new_partitions`, RESOURCE_LIMIT_EXCEEDED
naming ``RLIMIT_NOFILE``); the cache gets what the partitions leave, at most
``log.open.segments.max`` segments, and none when they leave nothing (a read of an inactive
segment then opens its files for the read). A start whose partitions do not fit fails with
the counts and what to raise (:meth:`DescriptorBudget.check_startup`).

The count is an estimate on the safe side: an active segment without transactions holds 5,
a ``.txnindex`` only exists in a segment that has an aborted transaction.

Concurrency: immutable values and pure functions, apart from the two that read and set the
process's limit.
"""

from __future__ import annotations

import errno
import logging
import resource
from dataclasses import dataclass

from .errors import ResourceLimitExceededError, TooManyOpenFilesError
from .open_segments import DEFAULT_OPEN_SEGMENTS_MAX, DESCRIPTORS_PER_SEGMENT

__all__ = [
    "DEFAULT_DESCRIPTORS_RESERVED",
    "DESCRIPTORS_PER_PARTITION",
    "OPEN_FILES_LIMIT_NAME",
    "DescriptorBudget",
    "raise_open_files_limit",
    "ran_out_of_descriptors",
    "read_open_files_limit",
]

log = logging.getLogger(__name__)

#: The limit a refusal names (ErrorInfo metadata ``limit``): the process's ``ulimit -n``.
OPEN_FILES_LIMIT_NAME = "RLIMIT_NOFILE"
#: Descriptors a partition holds whatever the cache does: its active segment's.
DESCRIPTORS_PER_PARTITION = DESCRIPTORS_PER_SEGMENT
#: The limit a system-wide shortage (ENFILE) names: Linux's ``fs.file-max``.
SYSTEM_FILES_LIMIT_NAME = "fs.file-max"
#: The default ``log.descriptors.reserved``.
DEFAULT_DESCRIPTORS_RESERVED = 512
# What Linux allows when the hard limit says "unlimited" (fs.nr_open's default).
_NR_OPEN_DEFAULT = 1_048_576


def ran_out_of_descriptors(exc: BaseException) -> str | None:
    """The limit that ``exc`` ran into if an EMFILE (:data:`OPEN_FILES_LIMIT_NAME`) or ENFILE
    (:data:`SYSTEM_FILES_LIMIT_NAME`) is in its cause chain, else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            if current.errno == errno.EMFILE:
                return OPEN_FILES_LIMIT_NAME
            if current.errno == errno.ENFILE:
                return SYSTEM_FILES_LIMIT_NAME
        current = current.__cause__ or current.__context__
    return None


def read_open_files_limit() -> tuple[int, int]:
    """The process's (soft, hard) ``RLIMIT_NOFILE``; "unlimited" as ``fs.nr_open``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _finite(soft), _finite(hard)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (any process may); returns the soft
    limit before and after. A refusal leaves the limit as it was (logged)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d to %d: %s",
                        soft, target, exc)
            return _finite(soft), _finite(soft)
        return _finite(soft), target
    return _finite(soft), _finite(soft)


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return _NR_OPEN_DEFAULT


def _finite(limit: int) -> int:
    return _nr_open() if limit == resource.RLIM_INFINITY else limit


@dataclass(frozen=True)
class DescriptorBudget:
    """The storage's share of ``RLIMIT_NOFILE``: ``limit`` (the soft limit), ``reserved``
    (``log.descriptors.reserved``), ``open_segments_max`` (``log.open.segments.max``) and
    ``connections`` (the connections the server may hold at once: one descriptor each).

    Invariants: every value is non-negative (the settings' parser checks their ranges).
    """

    limit: int
    reserved: int = DEFAULT_DESCRIPTORS_RESERVED
    open_segments_max: int = DEFAULT_OPEN_SEGMENTS_MAX
    connections: int = 0

    @property
    def storage_limit(self) -> int:
        """What the limit leaves the storage: everything but the connections and the
        reserve (negative when they alone do not fit)."""
        return self.limit - self.connections - self.reserved

    @property
    def partitions_max(self) -> int:
        """Most partitions whose active segments fit."""
        return max(0, self.storage_limit // DESCRIPTORS_PER_PARTITION)

    def left_after(self, partitions: int) -> int:
        """Descriptors left for inactive segments beside ``partitions`` active ones."""
        return self.storage_limit - DESCRIPTORS_PER_PARTITION * partitions

    def open_segments_capacity(self, partitions: int) -> int:
        """The cache's capacity beside ``partitions``: ``log.open.segments.max``, or what the
        partitions leave if less (0 when they leave nothing)."""
        fits = max(0, self.left_after(partitions)) // DESCRIPTORS_PER_SEGMENT
        return min(self.open_segments_max, fits)

    def check_new_partitions(self, topic: str, existing: int, new: int) -> None:
        """Refuse ``new`` partitions of ``topic`` unless their active segments fit beside the
        ``existing`` ones.

        Raises:
            ResourceLimitExceededError: they do not fit (``limit`` = ``RLIMIT_NOFILE``); the
                message gives the need and what is left, and names no path.
        """
        need = DESCRIPTORS_PER_PARTITION * new
        left = self.left_after(existing)
        if need <= left:
            return
        raise ResourceLimitExceededError(
            f"cannot create topic {topic} with {new:,} partitions: they need {need:,} file "
            f"descriptors ({DESCRIPTORS_PER_PARTITION} each, for its active segment) and "
            f"{max(left, 0):,} are left of the server's open files limit RLIMIT_NOFILE "
            f"{self.limit:,} ({existing:,} partitions hold "
            f"{DESCRIPTORS_PER_PARTITION * existing:,}, {self.reserved:,} are reserved: "
            f"log.descriptors.reserved{self._connections_clause()}); at most "
            f"{max(left, 0) // DESCRIPTORS_PER_PARTITION:,} "
            "more partitions fit until the server's operator raises the limit (ulimit -n)",
            limit=OPEN_FILES_LIMIT_NAME,
        )

    def check_startup(self, partitions: int, segments: int | None = None) -> None:
        """Fail a start whose ``partitions`` do not fit (``segments``: how many segments
        they have, when known, for the message).

        Raises:
            TooManyOpenFilesError: they do not fit; the message says how many descriptors are
                needed and what to raise.
        """
        if self.left_after(partitions) >= 0:
            return
        raise TooManyOpenFilesError(self.shortage(partitions, segments))

    def shortage(self, partitions: int, segments: int | None, *, ran_out: bool = False) -> str:
        """The start-up message for ``partitions`` (of ``segments`` segments) that need more
        descriptors than the limit, or (``ran_out``) ran out of them while loading."""
        need = self.connections + self.reserved + DESCRIPTORS_PER_PARTITION * partitions
        of_segments = f" of {segments:,} segments" if segments is not None else ""
        loading = " (EMFILE while loading)" if ran_out else ""
        lower = " or lower --set log.descriptors.reserved=N"
        if self.connections:
            lower += ", max_connections, metrics_connections_max or kafka_connections_max"
        return (
            f"Too many open files{loading}: {need:,} descriptors needed for {partitions:,} "
            f"partitions{of_segments} ({DESCRIPTORS_PER_PARTITION} per partition for its active "
            "segment, "
            f"{self.reserved:,} reserved: log.descriptors.reserved"
            f"{self._connections_clause().replace(', ', '; ', 1)}; inactive segments open "
            f"beyond that, at most log.open.segments.max = {self.open_segments_max:,}), "
            f"RLIMIT_NOFILE is {self.limit:,}: raise it with ulimit -n (its hard limit "
            "bounds what the server raises it to; docker run --ulimit nofile=N:N, systemd "
            f"LimitNOFILE=N){lower}; with these reservations RLIMIT_NOFILE {self.limit:,} "
            f"leaves room for {self.partitions_max:,} partitions"
        )

    def _connections_clause(self) -> str:
        """", N for connections: ..." when the server counts any, else nothing."""
        if not self.connections:
            return ""
        return (f", {self.connections:,} for connections: max_connections + "
                "metrics_connections_max + kafka_connections_max")
