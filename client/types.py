"""The values the client hands back: topics, produce and fetch results, consumed records.

Plain immutable Python values, so callers never touch generated protobuf classes (whose
``int64`` fields and default-instead-of-missing rules are easy to misread). Conversions from
the broker.proto messages live in :mod:`stratalog.client.wire`.

Record-heavy values are tuples (``NamedTuple``): building one is a single C call, which matters
when a consumer turns a million records a second into Python objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from stratalog.records import Header, TimestampType

__all__ = [
    "AbortedTransaction",
    "CleaningResult",
    "ConsumerRecord",
    "DeletedGroup",
    "FetchResult",
    "GroupDescription",
    "GroupMemberDescription",
    "ListedGroup",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "ProduceResult",
    "ProducerIdAndEpoch",
    "ProducerRecord",
    "RecordMetadata",
    "TopicInfo",
    "TopicPartition",
    "TransactionDescription",
]


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What the server says about one partition (``PartitionDescription``).

    ``max_timestamp`` is -1 for an empty partition; ``log_dir`` says which of the server's log
    directories holds the partition, by its index in the server's ``log_dirs`` ("0" for the
    first), never its path.

    The log cleaner's position, for a partition of a compacted topic (``None`` for any other
    topic): ``cleaned_offset``, the first offset not yet cleaned; ``dirty_ratio``, the bytes
    past it over the bytes of the cleanable log (0..1; the cleaner picks the partition at
    ``min.cleanable.dirty.ratio``); ``last_clean_ms``, when it was last cleaned (ms since the
    epoch; -1: not since the server started).
    """

    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segment_count: int
    log_dir: str
    max_timestamp: int
    cleaned_offset: int | None = None
    dirty_ratio: float | None = None
    last_clean_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic, its effective configs (defaults included) and its partitions in order.

    ``overridden_configs`` names the configs set on the topic itself (by ``create_topic`` or
    ``alter_topic_configs``); the other ``configs`` are the server's defaults.
    """

    name: str
    configs: Mapping[str, str]
    partitions: tuple[PartitionInfo, ...]
    overridden_configs: frozenset[str] = frozenset()

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """What one cleaning of a partition did (``Client.clean_partition``, CleanPartition).

    The partition is cleaned from its log start up to ``end_offset`` (the first offset not
    cleaned, the cleaner's position now; it was ``first_dirty_offset_before``): of the
    ``records_read`` records of the ``segments_before`` segments rewritten, ``records_kept``
    survive, in ``segments_after`` segments. ``bytes_read`` counts both passes over the log (the
    offset map's and the rewrite's), ``bytes_written`` the cleaned segments.
    """

    topic: str
    partition: int
    first_dirty_offset_before: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    segments_before: int
    segments_after: int
    duration_ms: int

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where one Produce request's records went: offsets ``base_offset .. last_offset``.

    ``log_append_time`` is -1 unless the topic stamps records with LogAppendTime.
    ``duplicate``: the batches repeated ones their producer (same producer id, epoch and
    sequences) had already stored, so nothing was written and the offsets are the original ones.
    ``throttle_time_ms``: how long the server held the answer back because the principal was
    over its produce byte-rate quota (0: not throttled).
    """

    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False
    throttle_time_ms: int = 0


class ProducerRecord(NamedTuple):
    """A record to send: value, optional key, timestamp (ms; ``None`` = now) and headers.

    ``None`` for ``value`` is a tombstone; ``None`` for ``key`` is "no key" (distinct from
    ``b""``). Headers are ``(str, bytes | None)`` pairs, duplicates allowed, order kept.
    """

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: Sequence[Header] = ()


class RecordMetadata(NamedTuple):
    """Where the Producer's record landed: partition, offset, and the timestamp it was stored with.

    ``timestamp`` is the record's CreateTime, or the broker's LogAppendTime when the topic uses it.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """A record read back: where it is (topic, partition, offset) and what it holds.

    ``timestamp`` is in ms since the epoch; ``timestamp_type`` says whether the producer
    (CREATE_TIME) or the broker (LOG_APPEND_TIME) set it. Key and value are ``None`` for nulls.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class OffsetAndTimestamp(NamedTuple):
    """The answer of ListOffsets: an offset (-1 when none matched) and its record's timestamp.

    ``timestamp`` is -1 for EARLIEST/LATEST queries and when nothing matched.
    """

    offset: int
    timestamp: int


class ProducerIdAndEpoch(NamedTuple):
    """What InitProducerId gives (Kafka's ``ProducerIdAndEpoch``): the id an idempotent or
    transactional producer stamps its batches with, and its epoch (a newer epoch of the same id
    fences the older ones)."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """The transaction coordinator's state of one transactional id (DescribeTransaction).

    ``state`` is one of Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort,
    CompleteCommit, CompleteAbort, Dead, PrepareEpochFence. ``transaction_start_time_ms`` is -1
    when no transaction is open; ``partitions`` are those of the open (or completing) one.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    last_update_time_ms: int
    partitions: tuple[TopicPartition, ...] = ()


class Identity(NamedTuple):
    """Who the server believes the caller is (WhoAmI): ``principal`` such as ``"User:alice"``
    or ``"User:CN=client-1,O=example"``; ``authenticated_by`` one of ``"none"`` (anonymous),
    ``"tls"`` (a client certificate), ``"password"``, ``"token"``; ``host``, the client address
    the server sees."""

    principal: str
    authenticated_by: str
    host: str


class BrokerAddress(NamedTuple):
    """A broker of the cluster (Metadata): its node id, the ``HOST:PORT`` it advertises and
    its rack (``broker_rack``; "" for none)."""

    node_id: int
    address: str
    rack: str = ""


class PartitionLeadership(NamedTuple):
    """Who leads one partition (Metadata): the ``leader`` node id (-1: none), its
    ``leader_epoch``, the ``replicas`` (preferred leader first) and the in-sync ``isr``."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class PartitionReassignment(NamedTuple):
    """A partition being reassigned (ListPartitionReassignments): its ``replicas`` (the
    target, then the ones being removed), the ``adding`` and ``removing`` ones, its
    ``leader`` (-1: none), and, from the server that leads it, its progress: the leader's
    ``leader_log_end_offset`` (-1: the answering server does not lead it) and each follower's
    log end offset as of its last fetch (``progress``: node id -> offset, -1 before any)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    leader: int
    leader_log_end_offset: int
    progress: Mapping[int, int]

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas the partition ends with."""
        return tuple(r for r in self.replicas if r not in self.removing)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """What the Metadata RPC answers: the live ``brokers``, the controller (``controller_id``
    -1 while none is known; ``controller_epoch`` grows by one per election), the ``topics``
    by name with their partitions' leadership, and the ``node_id`` of the server that
    answered. A single server reports itself as broker 0, controller and leader of all."""

    node_id: int
    controller_id: int
    controller_epoch: int
    brokers: tuple[BrokerAddress, ...]
    topics: dict[str, tuple[PartitionLeadership, ...]]


class AbortedTransaction(NamedTuple):
    """A transaction that was aborted: its producer and the first offset it wrote."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One FetchByOffset/FetchByTimestamp answer (or one message of a Subscribe stream).

    Exactly one of ``records`` (FETCH_FORMAT_RECORDS: decoded by the server, offsets >= the one
    asked for) and ``record_batches`` (FETCH_FORMAT_RECORD_BATCHES: whole Kafka v2 batches as
    stored; the first may start before the requested offset) is filled for a given format.
    ``next_offset`` is where the next fetch should start; ``high_watermark`` is one past the last
    readable offset. ``matched_offset``/``matched_timestamp`` are set by fetches by timestamp
    (-1 and -1 when no record is that recent), and are -1 otherwise. ``aborted_transactions``
    (READ_COMMITTED, RECORD_BATCHES) name the aborted transactions the batches overlap.
    ``last_stable_offset`` is one past the last offset a READ_COMMITTED reader may see: the first
    offset of the earliest open transaction, or the high watermark when none is open.
    ``throttle_time_ms``: how long the server held this answer back because the principal was
    over its fetch byte-rate quota (0: not throttled).
    """

    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    next_offset: int
    records: list[ConsumerRecord] = field(default_factory=list)
    record_batches: bytes = b""
    matched_offset: int = -1
    matched_timestamp: int = -1
    aborted_transactions: tuple[AbortedTransaction, ...] = ()
    last_stable_offset: int = -1
    throttle_time_ms: int = 0


# -- consumer groups (issue 27; Client.list_groups, describe_groups, delete_groups) --------------


class ListedGroup(NamedTuple):
    """A group a server coordinates: ``state`` is Kafka's name (Empty, PreparingRebalance,
    CompletingRebalance, Stable, Dead)."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class GroupMemberDescription:
    """A member of a described group. ``assignment``: its partitions, decoded from
    ``assignment_bytes`` for protocol type "consumer" (empty outside Stable); ``metadata``: its
    subscription bytes."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...] = ()
    metadata: bytes = b""
    assignment_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A described group; ``error`` is that group's own error (None: described). A group that
    does not exist is described as state "Dead" with no members and ``error`` a
    GroupIdNotFoundError (Kafka's DescribeGroups v6+; v0-v5 answered Dead without an error)."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[GroupMemberDescription, ...] = ()
    error: Exception | None = None


class DeletedGroup(NamedTuple):
    """One group's outcome of ``delete_groups``: ``error`` None when deleted."""

    group_id: str
    error: Exception | None
