"""The Consumer: read topics' partitions from a starting point, optionally following the end;
with ``group_id``, as a member of a consumer group.

Intuition: one fetcher task per partition keeps one fetch ahead of the reader. It asks for
whole Kafka v2 batches (FETCH_FORMAT_RECORD_BATCHES: the server sends the bytes it stores,
without decoding them), decodes them here with the shared codec (CRC checked, control batches
and aborted transactions skipped, see :mod:`stratalog.client.fetched`), and hands the batches to
the reader through one bounded queue. The reader iterates

* per record: ``async for record in consumer`` gives :class:`ConsumerRecord` tuples;
* per batch: ``async for batch in consumer.batches()`` gives :class:`ConsumedBatch` values, whose
  records are not wrapped again (the fast path: about one Python object per record).

What it reads: one ``topic`` (partitions named by number, as before), ``topics=[...]`` (every
partition of each), or, with a group, a ``pattern``. Everything inside is keyed by
:class:`~stratalog.client.types.TopicPartition`. With ``group_id`` the partitions come and go
with the group's assignment: :class:`~stratalog.client.group_consumer.GroupDriver` carries out
the group member's actions and calls :meth:`Consumer._add_partition` and
:meth:`Consumer._remove_partitions`; the reader's polls and handed-out positions go to it, so
that a commit covers only records the reader was given (docs/client.md, "Consumer groups").

Positions (Kafka's consumer position): ``position(p)`` is the offset after the last record
handed to the caller from partition ``p``, whichever way it reads: after ``async for record``
stopped at offset 1 it is 2, after a batch from ``batches()`` it is the batch's ``next_offset``.
Records fetched ahead but not handed over do not count, and stay for the next iteration: a
reader that breaks out of a loop and iterates again, or a new Consumer started at a saved
``position()``, neither skips nor repeats a record. The fetchers run ahead of the reader
(their own cursor), so what they hold is kept apart from what was delivered: decoded batches
wait in the queue and then in ``_pending`` until handed over, and the batch being handed out
record by record is ``_in_hand``.

Starting points: ``"earliest"``, ``"latest"``, an offset, or ``start_timestamp_ms`` (the first
record with a timestamp at or after it; the log end when there is none). ``seek*`` methods move
a partition later on. Without ``follow`` the iteration ends once every partition has been read
to the end it had when the consumer got there; with ``follow`` it waits for new records, by
long-poll fetches (``max_wait_ms``) or over a Subscribe stream (``use_subscribe=True``).

Isolation (Kafka's ``isolation.level``): READ_UNCOMMITTED (the default) reads every data record,
those of open and aborted transactions included; READ_COMMITTED reads up to the last stable
offset (LSO: the first offset of the earliest open transaction) and drops the records of aborted
transactions, so it sees only committed records, each transaction whole; without ``follow`` it
ends at the LSO. Transaction markers (control batches) never reach the reader in either mode.

Errors: a fetch that fails with a retriable error is retried (reads are idempotent) with
backoff, up to ``retries`` times in a row; anything else is raised to the reader, except an
offset outside the log (retention or DeleteRecords moved the start past it, or it was asked for
past the end), which ``auto_offset_reset`` decides, with Kafka's ``auto.offset.reset`` names:
"earliest" (the default: continue at the log start), "latest" (at the log end), or "none" (raise
:class:`~stratalog.client.errors.OffsetOutOfRangeError`; "error" is its older name). A reset
is never silent: it is logged at WARNING and handed to ``on_offset_reset`` as an
:class:`OffsetReset`, since a position that jumps re-reads or skips records.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from stratalog.records import CorruptRecordError as RecordCorruptError

from . import wire
from .bootstrap import bootstrap_targets
from .client import Client
from .credentials import Credentials, TlsConfig, channel_security
from .errors import OffsetOutOfRangeError, StratalogError
from .fetched import ConsumedBatch, decode_fetched
from .group_consumer import GroupDriver, RebalanceCallback
from .groups import CooperativeStickyAssignor, GroupMetadata, MembershipConfig, PartitionAssignor
from .types import ConsumerRecord, FetchResult, OffsetAndTimestamp, TopicPartition
from .wire import EARLIEST, LATEST, FetchFormat, IsolationLevel

__all__ = ["DEFAULT_FETCH_BYTES_MAX", "OFFSET_RESET_POLICIES", "Consumer", "ConsumerClosedError",
           "OffsetReset"]

logger = logging.getLogger(__name__)

#: Bytes asked for per fetch (the first batch always comes whole, even if larger).
DEFAULT_FETCH_BYTES_MAX = 8 * 1024 * 1024

_END: Any = object()  # a fetcher's "this partition is read to its end" message


#: ``auto_offset_reset`` values, Kafka's names; "error" is accepted as an older name of "none".
OFFSET_RESET_POLICIES = ("earliest", "latest", "none")


class ConsumerClosedError(RuntimeError):
    """Iterating or seeking a closed Consumer."""


class OffsetReset(NamedTuple):
    """A partition's position was outside its log and ``auto_offset_reset`` moved it.

    ``offset`` is where the reader was going to read; ``log_start_offset`` and
    ``log_end_offset`` the log's bounds then (None when the server did not say); ``new_offset``
    where reading continues.
    """

    topic: str
    partition: int
    offset: int
    log_start_offset: int | None
    log_end_offset: int | None
    new_offset: int


class _InHand:
    """The batch whose records are being handed to a per-record reader, one at a time.

    ``records`` is the one iterator over them, shared by every ``async for`` over the Consumer
    (a reader that breaks and iterates again continues it); ``last`` is the last record handed
    out (None before the first). Kept on the Consumer rather than in the iterating generator,
    whose state a ``break`` abandons. Event-loop only.
    """

    __slots__ = ("batch", "last", "partition", "records")

    def __init__(self, partition: TopicPartition, batch: ConsumedBatch) -> None:
        self.partition = partition
        self.batch = batch
        self.records: Iterator[ConsumerRecord] = batch.iter_consumer_records()
        self.last: ConsumerRecord | None = None

    def position(self) -> int:
        """The offset after the last record handed out (one must have been); the batch's
        ``next_offset`` (past any control or compacted-away offsets at its end) once its last
        record was."""
        last = self.last
        assert last is not None, "no record handed out yet"
        if last.offset >= self.batch.offsets[-1]:
            return self.batch.next_offset
        return last.offset + 1

    def rest(self) -> ConsumedBatch:
        """The records not handed out yet."""
        if self.last is None:
            return self.batch
        return self.batch.from_offset(self.last.offset + 1)


class Consumer:
    """Reads records of topics' partitions, in offset order within each partition.

    Holds the assigned partitions, each one's position (the offset after the last record
    handed to the reader, module docstring), a fetcher task per partition, a bounded queue of
    decoded batches (at most ``prefetch_batches`` fetch responses wait in memory), the batches
    taken from it but not handed over yet (``_pending``, at most one fetch response's) and the
    batch being handed out record by record (``_in_hand``). Invariants: a partition's records
    reach the reader in offset order and never twice for one position; ``position(p)`` is where
    a reader resuming ``p`` gets its next record, so nothing is skipped or repeated across
    iterations, breaks included; after ``seek`` nothing fetched for the old position is
    delivered (each seek or start takes a new epoch, from one counter for all partitions, so
    nothing fetched before a revocation is delivered after the partition comes back). Without
    a group it holds no durable state: positions are lost with the process; with one, the
    group's committed offsets are the server's (a crash re-reads what was handed out since
    the last commit). Event-loop only, one reader at a time (two tasks iterating one
    Consumer at once share its records between them).

    Args:
        client: a :class:`Client`, or a target string or bootstrap targets (a list, or
            comma-separated) from which the Consumer makes one, which it owns and closes.
        tls, auth: TLS and credentials of the Client made from a target string (see
            :class:`Client`).
        topic: the topic to read (or ``topics=``, or with a group ``pattern=``: exactly one).
        topics: several topics to read, every partition of each.
        pattern: with ``group_id``: subscribe to the topics matching this regular expression
            (in full), checked again every ``metadata_max_age_ms``.
        group_id: join this consumer group: partitions come from its assignment and start at
            its committed offsets (else ``auto_offset_reset``, "latest" by default for a
            group); implies ``follow``.
        group_instance_id, session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms,
            enable_auto_commit, auto_commit_interval_ms, assignors: the group member's
            settings, Kafka's consumer settings of the same names (docs/client.md,
            "Settings"); ``assignors`` default to cooperative-sticky only.
        held_heartbeats: ask the coordinator to hold each Heartbeat up to
            ``heartbeat_interval_ms``, answering at once when the group rebalances, so a
            rebalance is learnt of in one round trip (docs/groups.md "Held heartbeats");
            False: Kafka's schedule.
        on_partitions_assigned, on_partitions_revoked, on_partitions_lost: rebalance
            callbacks, called on the event loop with a frozenset of TopicPartition.
        metadata_max_age_ms: how often a group consumer re-reads its topics' metadata.
        partitions: which partitions (default: all of them).
        start: "earliest", "latest" or an offset, for every partition.
        start_timestamp_ms: start at the first record with a timestamp >= this (overrides
            ``start``).
        follow: keep waiting for new records at the end instead of stopping.
        use_subscribe: follow over Subscribe streams instead of long-poll fetches.
        max_bytes: bytes asked per fetch (or per streamed message).
        max_wait_ms: how long one long-poll fetch waits at the log end (``follow`` only).
        auto_offset_reset: where to go when the position is outside the log: "earliest",
            "latest", or "none" to raise OffsetOutOfRangeError (module docstring).
        on_offset_reset: called with an :class:`OffsetReset` on the event loop each time
            ``auto_offset_reset`` moves a position (e.g. to tell a user); it must not block.
        isolation_level: READ_COMMITTED reads committed records only, up to the LSO.
        retries: consecutive retriable failures of one partition before its error is raised.
        retry_backoff_ms, retry_backoff_max_ms: first and largest wait before a retry.
        prefetch_batches: fetch responses decoded ahead of the reader, in all.
        verify_crc: check each batch's CRC-32C while decoding.
    """

    def __init__(
        self,
        client: Client | str | Sequence[str],
        topic: str | None = None,
        *,
        topics: Sequence[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        held_heartbeats: bool = True,
        max_poll_interval_ms: int = 300_000,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        assignors: Sequence[PartitionAssignor] | None = None,
        on_partitions_assigned: RebalanceCallback | None = None,
        on_partitions_revoked: RebalanceCallback | None = None,
        on_partitions_lost: RebalanceCallback | None = None,
        metadata_max_age_ms: int = 300_000,
        partitions: Sequence[int] | None = None,
        start: Literal["earliest", "latest"] | int = "earliest",
        start_timestamp_ms: int | None = None,
        follow: bool = False,
        use_subscribe: bool = False,
        max_bytes: int = DEFAULT_FETCH_BYTES_MAX,
        max_wait_ms: int = 500,
        auto_offset_reset: Literal["earliest", "latest", "none", "error"] | None = None,
        on_offset_reset: Callable[[OffsetReset], None] | None = None,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        retries: int = 10,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 2000,
        prefetch_batches: int = 4,
        verify_crc: bool = True,
        tls: TlsConfig | None = None,
        auth: Credentials | None = None,
    ) -> None:
        if not isinstance(client, Client):
            try:
                targets = bootstrap_targets(client)
            except TypeError:
                raise TypeError(
                    f"client must be a Client, a target str or a list of them, got {client!r}"
                ) from None
        # A target string becomes a Client in start(), inside the event loop that uses it.
        self._target = None if isinstance(client, Client) else client
        self._client: Client = client if isinstance(client, Client) else None  # type: ignore[assignment]
        self._owns_client = not isinstance(client, Client)
        if isinstance(client, Client) and (tls is not None or auth is not None):
            raise TypeError("tls= and auth= are for a target string; a Client has its own")
        self._tls, self._auth = tls, auth
        if not isinstance(client, Client):
            # Refuses what the Client would, now.
            channel_security(",".join(targets), tls, auth, None)
        if sum(x is not None for x in (topic, topics, pattern)) != 1:
            raise TypeError("name what to read with exactly one of topic, topics= or pattern=")
        if topics is not None:
            if isinstance(topics, str | bytes) or not isinstance(topics, Sequence) or not topics:
                raise TypeError("topics must be a non-empty sequence of topic names")
            if len(set(topics)) != len(topics):
                raise ValueError(f"topics has duplicates: {list(topics)}")
            self._topics: tuple[str, ...] = tuple(wire.check_topic(t) for t in topics)
        elif topic is not None:
            self._topics = (wire.check_topic(topic),)
        else:
            if group_id is None:
                raise TypeError("pattern= needs group_id= (a pattern subscribes a group member)")
            self._topics = ()
        # One topic named without a group: partitions are numbers in the API, as they were.
        self._single_topic = topic is not None and group_id is None
        self._topic = self._topics[0] if self._topics else ""
        if partitions is not None and (group_id is not None or len(self._topics) != 1):
            raise TypeError("partitions= is for one topic without a group (a group assigns them)")
        if partitions is not None:
            if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence):
                raise TypeError("partitions must be a sequence of partition numbers")
            partitions = [wire.check_partition(p) for p in partitions]
            if not partitions:
                raise ValueError("partitions must not be empty (None means all)")
            if len(set(partitions)) != len(partitions):
                raise ValueError(f"partitions has duplicates: {partitions}")
        self._requested_partitions = partitions
        if start not in ("earliest", "latest"):
            wire.check_int(start, "start", 0, wire.INT64_MAX)
        self._start = start
        if start_timestamp_ms is not None:
            wire.check_int(start_timestamp_ms, "start_timestamp_ms", 0, wire.INT64_MAX)
        self._start_timestamp_ms = start_timestamp_ms
        for name, flag in (("follow", follow), ("use_subscribe", use_subscribe),
                           ("verify_crc", verify_crc)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        # A group member follows its partitions' ends: its reading ends with close().
        self._follow = follow or group_id is not None
        self._use_subscribe = use_subscribe
        self._max_bytes = wire.check_int(max_bytes, "max_bytes", 1, wire.INT32_MAX)
        self._max_wait_ms = wire.check_int(max_wait_ms, "max_wait_ms", 0, wire.INT32_MAX)
        if auto_offset_reset is None:
            # Kafka's consumer default for a group (where nothing is committed); the plain
            # Consumer's stays "earliest" (docs/client.md).
            auto_offset_reset = "latest" if group_id is not None else "earliest"
        if auto_offset_reset == "error":
            auto_offset_reset = "none"
        if auto_offset_reset not in OFFSET_RESET_POLICIES:
            raise ValueError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', "
                f"got {auto_offset_reset!r}"
            )
        self._auto_offset_reset = auto_offset_reset
        if on_offset_reset is not None and not callable(on_offset_reset):
            raise TypeError(f"on_offset_reset must be callable, got {on_offset_reset!r}")
        self._on_offset_reset = on_offset_reset
        self._isolation_level = IsolationLevel(
            wire.check_int(int(isolation_level), "isolation_level", 0, 1)
        )
        self._retries = wire.check_int(retries, "retries", 0, wire.INT32_MAX)
        self._retry_backoff_s = (
            wire.check_int(retry_backoff_ms, "retry_backoff_ms", 0, 3_600_000) / 1000.0
        )
        self._retry_backoff_max_s = (
            wire.check_int(retry_backoff_max_ms, "retry_backoff_max_ms", 0, 3_600_000) / 1000.0
        )
        self._prefetch_batches = wire.check_int(prefetch_batches, "prefetch_batches", 1, 10_000)
        self._verify_crc = verify_crc
        self._group_settings: dict[str, Any] | None = None
        if group_id is not None:
            for name, callback in (("on_partitions_assigned", on_partitions_assigned),
                                   ("on_partitions_revoked", on_partitions_revoked),
                                   ("on_partitions_lost", on_partitions_lost)):
                if callback is not None and not callable(callback):
                    raise TypeError(f"{name} must be callable, got {callback!r}")
            if isinstance(pattern, str):
                try:
                    pattern = re.compile(pattern)
                except re.error as err:
                    raise ValueError(f"pattern {pattern!r} is not a regular expression: {err}"
                                     ) from None
            if pattern is not None and not isinstance(pattern, re.Pattern):
                raise TypeError(f"pattern must be a str or re.Pattern, got {pattern!r}")
            for name, flag in (("enable_auto_commit", enable_auto_commit),
                               ("held_heartbeats", held_heartbeats)):
                if not isinstance(flag, bool):
                    raise TypeError(f"{name} must be a bool")
            config = MembershipConfig(  # checks every setting (ValueError naming it)
                group_id=group_id,
                topics=self._topics or ("-",),  # a pattern's matches come at start
                group_instance_id=group_instance_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                held_heartbeats=held_heartbeats,
                max_poll_interval_ms=max_poll_interval_ms,
                enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms,
                auto_offset_reset=self._auto_offset_reset,
                retry_backoff_ms=max(1, retry_backoff_ms),
                retry_backoff_max_ms=max(1, retry_backoff_max_ms),
                require_stable_offsets=self._isolation_level == IsolationLevel.READ_COMMITTED,
                assignors=tuple(assignors) if assignors is not None else (
                    CooperativeStickyAssignor(),),
            )
            self._group_settings = {
                "config": config,
                "pattern": pattern,
                "callbacks": (on_partitions_assigned, on_partitions_revoked, on_partitions_lost),
                "metadata_max_age_ms": wire.check_int(
                    metadata_max_age_ms, "metadata_max_age_ms", 1, wire.INT32_MAX),
            }
        elif pattern is not None or group_instance_id is not None:
            raise TypeError("pattern= and group_instance_id= need group_id=")
        # Every partition is keyed by TopicPartition: one topic's, several topics' or a group's.
        self._partitions: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        # The fetch epoch of each partition read now: one counter for all, bumped by each start
        # and seek, so what was fetched before (even before a revocation and a new assignment
        # of the same partition) never matches again.
        self._epochs: dict[TopicPartition, int] = {}
        self._epoch_last = 0
        self._finished: set[TopicPartition] = set()
        self._fetchers: dict[TopicPartition, asyncio.Task[None]] = {}
        self._queue: asyncio.Queue[tuple[TopicPartition | None, int, Any]] | None = None
        # (partition, epoch, batch) taken from the queue, not yet handed to the reader.
        self._pending: deque[tuple[TopicPartition, int, ConsumedBatch]] = deque()
        self._in_hand: _InHand | None = None
        self._started = False
        self._closed = False
        self._rng = random.Random()
        self._throttle_time_ms_total = 0
        self._group: GroupDriver | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def topic(self) -> str:
        """The topic being read (the first one, for several topics or a pattern)."""
        return self._topic

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics subscribed to (a pattern's: those it matched when last checked)."""
        if self._group is not None:
            return tuple(sorted(self._group.topics))
        return self._topics

    @property
    def throttle_time_ms_total(self) -> int:
        """How long the server held back this consumer's fetch answers and Subscribe messages
        in all, in ms, for its principal's fetch byte-rate quota (the sum of their
        ``throttle_time_ms``; Kafka's consumer reports ``fetch-throttle-time-avg`` and
        ``-max``). 0 while never throttled."""
        return self._throttle_time_ms_total

    @property
    def partitions(self) -> list[int] | list[TopicPartition]:
        """The partitions being read (known after :meth:`start`): partition numbers for one
        topic without a group, else :class:`TopicPartition` values."""
        if self._single_topic:
            return [tp.partition for tp in self._partitions]
        return list(self._partitions)

    async def start(self) -> None:
        """Resolve partitions and starting offsets, and start fetching (with ``group_id``:
        join the group; partitions come from its assignment). Called by iteration."""
        if self._closed:
            raise ConsumerClosedError("start() on a closed Consumer")
        if self._started:
            return
        if self._client is None:
            self._client = Client(self._target, tls=self._tls, auth=self._auth)  # type: ignore[arg-type]
        self._queue = asyncio.Queue(self._prefetch_batches)
        if self._group_settings is not None:
            self._group = GroupDriver(self, self._client, **self._group_settings)
            self._started = True
            await self._group.start()
            return
        partitions: list[TopicPartition] = []
        for topic in self._topics:
            info = await self._client.describe_topic(topic)
            if self._requested_partitions is None:
                partitions += [TopicPartition(topic, p.partition) for p in info.partitions]
                continue
            missing = [p for p in self._requested_partitions if p >= info.num_partitions]
            if missing:
                raise ValueError(
                    f"partitions {missing} do not exist: topic {topic!r} has "
                    f"{info.num_partitions} partitions"
                )
            partitions += [TopicPartition(topic, p) for p in self._requested_partitions]
        offsets = []
        for tp in partitions:
            if self._start_timestamp_ms is not None:
                offset = await self._offset_for_timestamp(tp, self._start_timestamp_ms)
            elif self._start == "earliest":
                offset = (await self._list_offsets(tp, EARLIEST)).offset
            elif self._start == "latest":
                offset = (await self._list_offsets(tp, LATEST)).offset
            else:
                offset = self._start  # type: ignore[assignment]
            offsets.append(offset)
        self._started = True
        for tp, offset in zip(partitions, offsets, strict=True):
            self._add_partition(tp, offset)

    async def close(self) -> None:
        """Stop fetching; with a group, first commit (``enable_auto_commit``) and leave it (a
        static member does not leave); close the client if the Consumer opened it.
        Idempotent."""
        if self._closed:
            return
        if self._group is not None:
            try:
                await self._group.close()
            finally:
                self._closed = True
        self._closed = True
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        for task in fetchers:
            task.cancel()
        if fetchers:
            await asyncio.gather(*fetchers, return_exceptions=True)
        self._wake_reader()
        if self._owns_client and self._client is not None:
            await self._client.close()

    def _wake_reader(self) -> None:
        """Wake a reader waiting on the queue: it looks at the Consumer again (closed, or the
        group failed). A full queue needs no wake (the reader's get does not wait)."""
        queue = self._queue
        if queue is not None and not queue.full():
            queue.put_nowait((None, -1, _END))

    # --- partitions (the group driver adds and removes them) ------------------------------------

    def _add_partition(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on (a start, or a group's new partition)."""
        if tp not in self._positions:
            self._partitions.append(tp)
        self._positions[tp] = offset
        self._restart_fetcher(tp)

    def _remove_partitions(self, partitions: frozenset[TopicPartition]) -> None:
        """Stop reading ``partitions`` (revoked or lost): their fetchers stop and what they
        fetched ahead is dropped (its epoch no longer exists)."""
        for tp in partitions:
            self._positions.pop(tp, None)
            self._epochs.pop(tp, None)
            self._finished.discard(tp)
            task = self._fetchers.pop(tp, None)
            if task is not None:
                task.cancel()
        if self._in_hand is not None and self._in_hand.partition in partitions:
            self._in_hand = None
        self._partitions = [tp for tp in self._partitions if tp not in partitions]

    def _restart_fetcher(self, tp: TopicPartition) -> None:
        self._epoch_last += 1
        self._epochs[tp] = self._epoch_last  # drops what _pending and the queue hold for it
        if self._in_hand is not None and self._in_hand.partition == tp:
            self._in_hand = None
        self._finished.discard(tp)
        task = self._fetchers.pop(tp, None)
        if task is not None:
            task.cancel()
        self._start_fetcher(tp)

    def _moved(self, tp: TopicPartition, offset: int) -> None:
        """The reader was handed ``tp``'s records before ``offset``."""
        self._positions[tp] = offset
        if self._group is not None:
            self._group.handed_out(tp, offset)

    def _in_hand_position(self) -> tuple[TopicPartition, int] | None:
        """The partition and position of the batch being handed out record by record, when a
        record of it was handed out (the group driver tells the member before each event)."""
        hand = self._in_hand
        if hand is None or hand.last is None:
            return None
        return hand.partition, hand.position()

    # --- positions -------------------------------------------------------------------------------

    def _tp(self, partition: int | TopicPartition | tuple[str, int]) -> TopicPartition:
        """``partition`` as a TopicPartition: a number names one of the (single) topic's."""
        if isinstance(partition, tuple):
            topic, number = partition
            return TopicPartition(wire.check_topic(topic), wire.check_partition(number))
        wire.check_partition(partition)
        if not self._single_topic:
            raise TypeError(
                f"partition {partition}: this Consumer reads several topics or a group's "
                "partitions: name it as a TopicPartition(topic, partition)")
        return TopicPartition(self._topic, partition)

    def position(self, partition: int | TopicPartition) -> int:
        """The offset after the last record of ``partition`` handed to the reader: where a
        reader resuming the partition (this Consumer iterated again, or a new one started
        there) gets its next record (Kafka's consumer position). Records fetched ahead but not
        handed over do not count. Before any record was handed, the starting offset (or where
        the last seek put it). ``partition``: a number (one topic, no group) or a
        TopicPartition."""
        tp = self._check_assigned(partition)
        hand = self._in_hand
        if hand is not None and hand.partition == tp and hand.last is not None:
            return hand.position()
        return self._positions[tp]

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this Consumer reads now: with a group, those the group assigned it
        (some may still be waiting for their committed offset)."""
        if self._group is not None:
            return self._group.assignment()
        return frozenset(self._partitions)

    def seek(self, partition: int | TopicPartition, offset: int) -> None:
        """Continue ``partition`` at ``offset``; anything fetched for the old position is
        dropped. An offset outside the log is handled by ``auto_offset_reset`` when fetched.
        With a group, the next commit commits ``offset`` for it."""
        if self._closed:
            raise ConsumerClosedError("seek() on a closed Consumer")
        tp = self._tp(partition)
        wire.check_int(offset, "offset", 0, wire.INT64_MAX)
        if self._group is not None:
            self._group.seek(tp, offset)  # ValueError when not assigned
        else:
            self._check_assigned(tp)
        self._add_partition(tp, offset)

    async def seek_to_timestamp(self, partition: int | TopicPartition, timestamp_ms: int) -> int:
        """Continue at the first record with a timestamp >= ``timestamp_ms`` (the log end when
        none is that recent); returns the offset."""
        tp = self._check_assigned(partition)
        offset = await self._offset_for_timestamp(tp, timestamp_ms)
        self.seek(tp, offset)
        return offset

    async def seek_to_beginning(self, *partitions: int | TopicPartition) -> None:
        """Continue the given partitions (default: all) at their log start offsets."""
        for partition in partitions or tuple(self._partitions):
            tp = self._check_assigned(partition)
            result = await self._list_offsets(tp, EARLIEST)
            self.seek(tp, result.offset)

    async def seek_to_end(self, *partitions: int | TopicPartition) -> None:
        """Continue the given partitions (default: all) at their log end offsets."""
        for partition in partitions or tuple(self._partitions):
            tp = self._check_assigned(partition)
            result = await self._list_offsets(tp, LATEST)
            self.seek(tp, result.offset)

    def _check_assigned(self, partition: int | TopicPartition) -> TopicPartition:
        tp = self._tp(partition)
        if not self._started:
            raise RuntimeError("the Consumer has not started: await start() or iterate first")
        if tp not in self._positions:
            if self._group is not None and tp in self._group.assignment():
                raise ValueError(
                    f"{tp.topic}-{tp.partition} has no position yet: its committed offset or "
                    "its auto_offset_reset offset is being looked up")
            if self._single_topic:
                raise ValueError(f"partition {tp.partition} is not assigned to this Consumer")
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this Consumer")
        return tp

    async def _offset_for_timestamp(self, tp: TopicPartition, timestamp_ms: int) -> int:
        wire.check_int(timestamp_ms, "timestamp_ms", 0, wire.INT64_MAX)
        result = await self._list_offsets(tp, timestamp_ms)
        if result.offset >= 0:
            return result.offset
        return (await self._list_offsets(tp, LATEST)).offset

    # --- groups ----------------------------------------------------------------------------------

    def _group_driver(self, what: str) -> GroupDriver:
        if self._group_settings is None:
            raise RuntimeError(f"{what} needs a group: pass group_id= to the Consumer")
        if self._group is None:
            raise RuntimeError("the Consumer has not started: await start() or iterate first")
        return self._group

    async def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, *,
        timeout_s: float | None = 30.0,
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition), by default the position
        of every assigned partition (records handed to the reader only), and wait for the
        answer; retriable failures are tried again until ``timeout_s``.

        Raises CommitFailedError (the member is no longer in that generation: its partitions
        may be another's), or the commit's own error (NotAuthorizedError, ...).
        """
        await self._group_driver("commit()").commit(offsets, timeout_s)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int] | None = None,
        callback: Callable[[dict[TopicPartition, int], BaseException | None], None] | None = None,
    ) -> asyncio.Future[dict[TopicPartition, int]]:
        """Start a commit (as :meth:`commit`, tried once) without waiting: the future ends with
        the offsets committed or the error, and ``callback(offsets, error)`` is called on the
        event loop when it ends (Kafka's ``commitAsync``)."""
        return self._group_driver("commit_async()").commit_async(offsets, callback)

    async def committed(
        self, partitions: Iterable[TopicPartition] | None = None, *,
        timeout_s: float | None = 30.0,
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions`` (default: the assignment); None
        where nothing is committed."""
        driver = self._group_driver("committed()")
        wanted = tuple(self.assignment() if partitions is None else partitions)
        found = await self._client.offset_fetch(driver.group_id, wanted, timeout_s=timeout_s)
        return {TopicPartition(*tp): (found[tp].offset if tp in found else None)
                for tp in wanted}

    def group_metadata(self) -> GroupMetadata:
        """The member's group id, generation, member id and instance id, for
        ``Producer.send_offsets_to_transaction`` (Kafka's ``groupMetadata()``)."""
        return self._group_driver("group_metadata()").group_metadata()

    # --- reading ---------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[ConsumerRecord]:
        await self.start()
        while True:
            hand = self._in_hand
            if hand is None:
                taken = await self._next_batch()
                if taken is None:
                    return
                hand = self._in_hand = _InHand(taken[0], taken[1])
            # The per-record cost here is one attribute store and one identity check (the
            # reader's position and a seek's drop of the batch), ~10 ns of ~400.
            for record in hand.records:
                hand.last = record
                yield record
                if hand is not self._in_hand:
                    break  # the reader seeked (or the group revoked) this partition
            else:
                self._in_hand = None
                self._moved(hand.partition, hand.batch.next_offset)

    async def batches(self) -> AsyncIterator[ConsumedBatch]:
        """Decoded batches in offset order per partition, interleaved across partitions.

        Ends when every partition is read to its end (without ``follow``); never ends with
        ``follow`` or a group until :meth:`close`. Empty batches are not yielded. A batch
        counts as handed over when it is yielded: ``position()`` is then its ``next_offset``.
        After a per-record iteration stopped inside a batch, the first batch yielded is that
        batch's rest.
        """
        await self.start()
        while True:
            hand = self._in_hand
            if hand is not None:
                self._in_hand = None
                partition, batch = hand.partition, hand.rest()
            else:
                taken = await self._next_batch()
                if taken is None:
                    return
                partition, batch = taken
            self._moved(partition, batch.next_offset)
            if len(batch):
                yield batch

    async def _next_batch(self) -> tuple[TopicPartition, ConsumedBatch] | None:
        """The next non-empty batch to hand over, as (partition, batch): from ``_pending``,
        else from the queue; None when the iteration ends (every partition read to its end
        without ``follow``, or the Consumer closed). Empty batches (all skipped: control,
        aborted) only move their partition's position, in order. Raises a fetcher's error,
        and with a group the member's failure. With a group, each call is a poll (the reader
        is alive: ``max_poll_interval_ms``)."""
        queue = self._queue
        assert queue is not None
        pending = self._pending
        group = self._group
        while not self._closed:
            if group is not None:
                group.reader_polled()  # raises the member's failure
            while pending:
                partition, epoch, batch = pending.popleft()
                if epoch != self._epochs.get(partition):
                    continue  # fetched before a seek or a revocation
                if not len(batch):
                    self._moved(partition, batch.next_offset)
                    continue
                return partition, batch
            if group is None and not self._follow and (
                len(self._finished) == len(self._partitions)
            ):
                return None
            # A reader with batches waiting would never let the loop run (get() does not
            # suspend on a non-empty queue), starving the fetchers' RPCs: yield once per fetch.
            await asyncio.sleep(0)
            partition, epoch, item = await queue.get()
            if self._closed:
                return None
            if partition is None or epoch != self._epochs.get(partition):
                continue  # a wake-up, or fetched before a seek or a revocation
            if item is _END:
                self._finished.add(partition)
                continue
            if isinstance(item, BaseException):
                raise item
            pending.extend((partition, epoch, batch) for batch in item)
        return None

    # --- fetching --------------------------------------------------------------------------------

    def _start_fetcher(self, tp: TopicPartition) -> None:
        epoch = self._epochs[tp]
        position = self._positions[tp]
        if self._follow and self._use_subscribe:
            coro = self._subscribe_loop(tp, epoch, position)
        else:
            coro = self._fetch_loop(tp, epoch, position)
        self._fetchers[tp] = asyncio.get_running_loop().create_task(coro)

    def _backoff_s(self, failures: int) -> float:
        delay = min(self._retry_backoff_max_s, self._retry_backoff_s * (2 ** (failures - 1)))
        return delay * self._rng.uniform(0.8, 1.2)

    def _decode(self, tp: TopicPartition, result: FetchResult, position: int) -> list[ConsumedBatch]:
        batches = decode_fetched(
            tp.topic,
            tp.partition,
            result.record_batches,
            position,
            result.high_watermark,
            aborted_transactions=result.aborted_transactions,
            read_committed=self._isolation_level == IsolationLevel.READ_COMMITTED,
            verify_crc=self._verify_crc,
        )
        if result.record_batches and not batches:
            raise RecordCorruptError(
                f"fetch of {tp.topic}-{tp.partition} at offset {position} returned "
                f"{len(result.record_batches)} bytes without one whole record batch"
            )
        return batches

    async def _list_offsets(self, tp: TopicPartition, timestamp_ms: int) -> OffsetAndTimestamp:
        # At this consumer's isolation level: for READ_COMMITTED, LATEST is the last stable
        # offset and a timestamp lookup finds no record past it (Kafka's ListOffsets).
        return await self._client.list_offsets(
            tp.topic, tp.partition, timestamp_ms, isolation_level=self._isolation_level
        )

    def _end_of(self, result: FetchResult) -> int:
        """Where reading a partition ends without ``follow``: the high watermark, or for
        READ_COMMITTED the last stable offset (Kafka's end offsets for read_committed), since
        nothing past the first open transaction is readable until it ends."""
        committed = self._isolation_level == IsolationLevel.READ_COMMITTED
        if committed and result.last_stable_offset >= 0:
            return result.last_stable_offset
        return result.high_watermark

    async def _reset_position(
        self, tp: TopicPartition, position: int, err: OffsetOutOfRangeError
    ) -> int:
        """Where to continue after ``position`` was out of range, by ``auto_offset_reset``;
        logs the reset and tells ``on_offset_reset``. Raises ``err`` for "none", and when the
        reset lands where it was (the log moved under it twice: let the reader know)."""
        if self._auto_offset_reset == "none":
            raise err
        if self._auto_offset_reset == "earliest":
            new_position = err.log_start_offset
            if new_position is None:
                new_position = (await self._list_offsets(tp, EARLIEST)).offset
        else:
            new_position = err.log_end_offset
            if new_position is None:
                new_position = (await self._list_offsets(tp, LATEST)).offset
        if new_position == position:
            raise err
        logger.warning(
            "%s-%d: offset %d out of range [%s, %s); auto_offset_reset=%s: continuing at %d",
            tp.topic, tp.partition, position, err.log_start_offset, err.log_end_offset,
            self._auto_offset_reset, new_position,
        )
        if self._on_offset_reset is not None:
            self._on_offset_reset(OffsetReset(
                tp.topic, tp.partition, position, err.log_start_offset, err.log_end_offset,
                new_position,
            ))
        return new_position

    async def _fetch_loop(self, tp: TopicPartition, epoch: int, position: int) -> None:
        queue = self._queue
        assert queue is not None
        failures = 0
        max_wait_ms = self._max_wait_ms if self._follow else 0
        try:
            while True:
                try:
                    result = await self._client.fetch_by_offset(
                        tp.topic,
                        tp.partition,
                        position,
                        max_bytes=self._max_bytes,
                        max_wait_ms=max_wait_ms,
                        fetch_format=FetchFormat.RECORD_BATCHES,
                        isolation_level=self._isolation_level,
                    )
                except OffsetOutOfRangeError as err:
                    position = await self._reset_position(tp, position, err)
                    continue
                except StratalogError as err:
                    failures += 1
                    if not err.retriable or failures > self._retries:
                        raise
                    await asyncio.sleep(self._backoff_s(failures))
                    continue
                failures = 0
                self._throttle_time_ms_total += result.throttle_time_ms
                batches = self._decode(tp, result, position)
                if batches:
                    position = batches[-1].next_offset
                    await queue.put((tp, epoch, batches))
                elif result.next_offset > position:
                    position = result.next_offset  # e.g. a gap the server skipped over
                elif not self._follow and position >= self._end_of(result):
                    await queue.put((tp, epoch, _END))
                    return
                elif max_wait_ms == 0:
                    # Following without long poll: pause instead of asking again at once.
                    await asyncio.sleep(self._retry_backoff_s)
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            await queue.put((tp, epoch, err))

    async def _subscribe_loop(self, tp: TopicPartition, epoch: int, position: int) -> None:
        queue = self._queue
        assert queue is not None
        failures = 0
        try:
            while True:
                try:
                    stream = self._client.subscribe(
                        tp.topic,
                        tp.partition,
                        offset=position,
                        max_bytes=self._max_bytes,
                        fetch_format=FetchFormat.RECORD_BATCHES,
                        isolation_level=self._isolation_level,
                    )
                    try:
                        async for result in stream:
                            failures = 0
                            self._throttle_time_ms_total += result.throttle_time_ms
                            batches = self._decode(tp, result, position)
                            if batches:
                                position = batches[-1].next_offset
                                await queue.put((tp, epoch, batches))
                    finally:
                        await stream.aclose()  # type: ignore[attr-defined]
                except OffsetOutOfRangeError as err:
                    position = await self._reset_position(tp, position, err)
                    continue
                except StratalogError as err:
                    failures += 1
                    if not err.retriable or failures > self._retries:
                        raise
                    await asyncio.sleep(self._backoff_s(failures))
                    continue
                # The server ended the stream (it stops following, e.g. on shutdown): resume.
                failures += 1
                if failures > self._retries:
                    raise StratalogError(
                        f"Subscribe to {tp.topic}-{tp.partition} kept ending at offset {position}"
                    )
                await asyncio.sleep(self._backoff_s(failures))
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            await queue.put((tp, epoch, err))
