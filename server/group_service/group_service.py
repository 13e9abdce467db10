"""Consumer groups as this server serves them: the one serving layer the group RPCs call.

Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupCoordinatorService.java``: it finds a group's ``__consumer_offsets`` partition
(``abs(hashCode(group_id)) % partitions``, records/group_partition.py), hands the request to that
partition's :class:`~.partition_coordinator.PartitionCoordinator`, and checks what the core
leaves to its caller (docs/groups.md, "Driving it"): that a committed partition exists and the
offset is not beyond its log end (a clear error naming the topic-partition, nothing written).
Requests about several groups (DescribeGroups, DeleteGroups) are split by partition and their
answers put back in the request's order; ListGroups asks every partition.

**Transactional offsets** (AddOffsetsToTxn, TxnOffsetCommit; KIP-447): the group's partition
joins the producer's transaction at the transaction coordinator (server/transactions), which
then writes its COMMIT or ABORT marker there; the serving layer tells this service of each such
marker (``ReplicaManager.internal_marker_listener``), and the partition's coordinator applies it
(``replay_end_transaction``) before EndTxn is answered.

**The topic.** ``__consumer_offsets`` is created by the first request that needs a coordinator
(FindCoordinator or any group request but ListGroups), as Kafka's
``KafkaApis.getOrCreateInternalTopic`` does, with offsets.topic.num.partitions partitions,
compacted (offsets_topic.topic_configs). Its partition count is the existing topic's from then
on, whatever the setting says later (as Kafka reads the topic's count). At start
(:meth:`start`), an existing topic's partitions are loaded, each in its own task; a request
for a partition still loading is answered COORDINATOR_LOAD_IN_PROGRESS by its core.

**One server.** Every partition of the topic is led here, so this server coordinates every
group.

**A cluster** (docs/groups.md, "Cluster mode"). The coordinator of a group is the leader of its
partition, as Kafka's: :attr:`GroupService.cluster` (cluster_partitions.py) creates the topic
in etcd, hears from the replica roles when this server begins and stops leading a partition
(their ``LeadershipListener``) and keeps ``partitions`` to the ones led here; a request for a
group whose partition is not led here is NOT_COORDINATOR; FindCoordinator answers the
partition's leader from the cluster view. A commit's topic and partition are checked against
the cluster's topics (the offset against the log end only when this server holds the
partition's log unreplicated: another leader's log end is not known here).

In a cluster the transactional offsets work as on one server: AddOffsetsToTxn reaches the
transaction coordinator (the leader of the id's state partition), which adds the group's
partition to the transaction; TxnOffsetCommit reaches the group's coordinator, which checks the
producer against the permissions the transaction coordinator gave it
(server/transaction_service/verified_partitions.py); the marker is written at the partition's
leader, which tells its group coordinator.

Crash behaviour: state is the topic's; see partition_coordinator.py. Concurrency: event-loop
only (loads decode in the thread pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

from stratalog.records.group_partition import partition_for_group
from stratalog.server.cluster.errors import NotEnoughReplicasError
from stratalog.server.groups import (
    CoordinatorNotAvailableError,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    GroupConfig,
    GroupError,
    GroupState,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    NotCoordinatorError,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetMetadataTooLargeError,
    PartitionOffset,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
)
from stratalog.server.storage.errors import (
    LogClosedError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from .cluster_partitions import ClusterPartitions, CoordinatorLocation
from .offsets_topic import GROUP_METADATA_TOPIC, topic_configs
from .partition_coordinator import PartitionCoordinator

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.settings import Settings
    from stratalog.server.transactions import TransactionCoordinator

__all__ = ["CLIENT_ID_CHARS_MAX", "REQUEST_GROUP_IDS_MAX", "GroupService", "group_config"]

logger = logging.getLogger(__name__)

#: Most groups (or FindCoordinator keys) one request may name, from either front end.
REQUEST_GROUP_IDS_MAX = 1000
#: Longest client id kept with a member (a longer one is cut): it is stored with the member and
#: written in its group's GroupMetadata record.
CLIENT_ID_CHARS_MAX = 255

_R = TypeVar("_R")


def group_config(settings: Settings) -> GroupConfig:
    """The coordinator's config from the server's settings (already range-checked)."""
    return GroupConfig(
        group_max_size=settings.group_max_size,
        initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=settings.group_min_session_timeout_ms,
        max_session_timeout_ms=settings.group_max_session_timeout_ms,
        offsets_retention_ms=settings.offsets_retention_minutes * 60 * 1000,
        offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
    )


class GroupService:
    """The group coordinators of this server's ``__consumer_offsets`` partitions (module
    docstring).

    Holds the serving layer (writes and reads of the topic), the settings, the coordinator
    config, the executor for loads, one :class:`PartitionCoordinator` per partition once the
    topic exists, and their load tasks.
    """

    def __init__(
        self,
        replica_manager: ReplicaManager,
        settings: Settings,
        executor: Executor,
        *,
        metrics: ServerMetrics | None = None,
        transactions: TransactionCoordinator | None = None,
    ) -> None:
        """``metrics``: where the coordinators count rebalances, commits and loads.
        ``transactions``: the transaction coordinator AddOffsetsToTxn and TxnOffsetCommit work
        with (None: they are refused); its markers on ``__consumer_offsets`` reach the group
        coordinators through the serving layer's ``internal_marker_listener``."""
        self._replicas = replica_manager
        self._settings = settings
        self._executor = executor
        self.config = group_config(settings)
        self._metrics = metrics
        self._transactions = transactions
        replica_manager.listen_to_internal_markers(self._marker_written)
        #: Partition -> its coordinator; empty until the topic exists. In a cluster: the
        #: partitions led here only.
        self.partitions: dict[int, PartitionCoordinator] = {}
        self._loads: list[asyncio.Task[None]] = []
        self._creating = asyncio.Lock()
        self._closed = False
        #: Cluster mode: the topic in etcd and the coordinators of the partitions led here
        #: (the replica roles' LeadershipListener); None on a single server.
        self.cluster: ClusterPartitions | None = None
        if settings.cluster:
            self.cluster = ClusterPartitions(replica_manager, settings, executor, self.config,
                                             self.partitions, metrics=metrics)

    # ---------------------------------------------------------------- life

    async def start(self) -> None:
        """Load an existing ``__consumer_offsets`` in the background (one task per partition)."""
        if self._settings.cluster:
            return
        count = self._partition_count()
        if count:
            self._start_coordinators(count)

    def begin_shutdown(self) -> None:
        """Answer every parked request NOT_COORDINATOR; nothing new is served."""
        self._closed = True
        if self.cluster is not None:
            self.cluster.begin_shutdown()
        for coordinator in self.partitions.values():
            coordinator.unload()

    async def close(self) -> None:
        """Stop the loads, the writers and the timers."""
        self._closed = True
        if self.cluster is not None:
            await self.cluster.close()
        for task in self._loads:
            task.cancel()
        for task in self._loads:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for coordinator in self.partitions.values():
            await coordinator.close()

    def _partition_count(self) -> int:
        """The topic's partitions (0: it does not exist): in a cluster, as the cluster view
        has them; on one server, its logs here."""
        if self.cluster is not None:
            return self.cluster.partition_count()
        return sum(1 for topic, _ in self._replicas.log_manager.logs() if topic ==
                   GROUP_METADATA_TOPIC)

    def _start_coordinators(self, count: int) -> None:
        for partition in range(count):
            coordinator = PartitionCoordinator(
                partition, self.config, self._replicas, self._executor,
                metrics=self._metrics,
            )
            self.partitions[partition] = coordinator
            self._loads.append(asyncio.get_running_loop().create_task(
                coordinator.load(), name=f"stratalog-group-load-{partition}"))

    async def _ensure_topic(self) -> int:
        """Create ``__consumer_offsets`` if it does not exist, and (one server) its
        coordinators; its partition count."""
        if self.cluster is not None:
            return await self.cluster.ensure_topic()
        if self.partitions:
            return len(self.partitions)
        async with self._creating:
            if self.partitions:
                return len(self.partitions)
            log_manager = self._replicas.log_manager
            if not log_manager.has_topic(GROUP_METADATA_TOPIC):
                settings = self._settings
                try:
                    await self._replicas.admin(functools.partial(
                        log_manager.create_topic, GROUP_METADATA_TOPIC,
                        settings.offsets_topic_num_partitions,
                        topic_configs(settings.offsets_topic_segment_bytes), internal=True,
                    ))
                    logger.info("created the internal topic %s: %d partitions, compacted",
                                GROUP_METADATA_TOPIC, settings.offsets_topic_num_partitions)
                except TopicAlreadyExistsError:
                    # A request cancelled while its creation ran in the executor (its client
                    # hung up) released the lock before the topic was in the catalogue; the
                    # creation finished meanwhile.
                    pass
            self._start_coordinators(self._partition_count())
            # A new topic's (or one found since start) loads are short: the request that made
            # it waits for them rather than be answered COORDINATOR_LOAD_IN_PROGRESS.
            await asyncio.gather(*self._loads)
            return len(self.partitions)

    async def _coordinator_of(self, group_id: str) -> PartitionCoordinator:
        """The coordinator of ``group_id``'s partition, which this server leads.

        Raises:
            CoordinatorNotAvailableError: shutting down, or the topic cannot be made now.
            NotCoordinatorError: a cluster member that does not lead the partition.
        """
        if self._closed:
            raise CoordinatorNotAvailableError("the server is shutting down")
        partition = partition_for_group(group_id, await self._ensure_topic())
        coordinator = self.partitions.get(partition)
        if coordinator is None:
            raise self._not_coordinator(group_id, partition)
        return coordinator

    @staticmethod
    def _not_coordinator(group_id: str, partition: int) -> NotCoordinatorError:
        return NotCoordinatorError(
            f"this server is not the coordinator of group {group_id!r}: it does not lead"
            f" {GROUP_METADATA_TOPIC}-{partition}; find the coordinator again")

    # ---------------------------------------------------------------- FindCoordinator

    async def find_coordinator(self, group_id: str) -> CoordinatorLocation:
        """Where ``group_id`` is coordinated, creating the topic if needed: this server
        (one server), or its partition's leader as the cluster view has it.

        Raises:
            CoordinatorNotAvailableError: shutting down, the topic cannot be made now, or (in
                a cluster) the partition has no leader, or its leader is not live.
        """
        if self._closed:
            raise CoordinatorNotAvailableError("the server is shutting down")
        partition = partition_for_group(group_id, await self._ensure_topic())
        if self.cluster is None:
            return CoordinatorLocation(partition)
        return self.cluster.leader_of(group_id, partition)

    def is_loading(self, partition: int) -> bool:
        """Whether this server's coordinator of ``partition`` of __consumer_offsets is still
        loading it (its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        coordinator = self.partitions.get(partition)
        return coordinator is not None and coordinator.core.loading

    # ---------------------------------------------------------------- membership

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.join_group(request, token, now))

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.sync_group(request, token, now))

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.heartbeat(request, token, now))

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.leave_group(request, token, now))

    # ---------------------------------------------------------------- offsets

    def check_commit(self, offsets: Iterable[PartitionOffset]) -> None:
        """What the core leaves to its caller (module docstring), for every partition before
        anything is written.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
            OffsetOutOfRangeError: an offset beyond the partition's log end.
            OffsetMetadataTooLargeError: metadata over offset.metadata.max.bytes.
        """
        log_manager = self._replicas.log_manager
        metadata_max = self.config.offset_metadata_max_bytes
        node = self._replicas.cluster_node
        for item in offsets:
            where = f"{item.topic}-{item.partition}"
            size = len(item.metadata.encode())
            if size > metadata_max:
                raise OffsetMetadataTooLargeError(
                    f"the metadata of {where} is {size} bytes, over offset.metadata.max.bytes"
                    f" {metadata_max}"
                )
            assignment = node.view.topics.get(item.topic) if node is not None else None
            if assignment is not None:
                # A replicated topic: its leader (maybe elsewhere) knows its log end.
                if item.partition not in assignment.replicas:
                    raise UnknownTopicOrPartitionError(
                        f"cannot commit an offset of {where}: topic {item.topic} has"
                        f" {assignment.partition_count} partitions")
                continue
            try:
                partition_log = log_manager.get_log(item.topic, item.partition)
            except UnknownTopicOrPartitionError as exc:
                raise UnknownTopicOrPartitionError(
                    f"cannot commit an offset of {where}: {exc}") from None
            end = partition_log.log_end_offset
            if item.offset > end:
                raise OffsetOutOfRangeError(
                    f"cannot commit offset {item.offset} of {where}: beyond its log end"
                    f" offset {end}",
                    log_start_offset=partition_log.log_start_offset, log_end_offset=end,
                )

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        """OffsetCommit, after :meth:`check_commit`."""
        self.check_commit(request.offsets)
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.commit_offsets(request, token, now))

    # ---------------------------------------------------------------- transactional offsets

    def _transaction_coordinator(self) -> TransactionCoordinator:
        if self._transactions is None:
            raise CoordinatorNotAvailableError(
                "transactional offset commits need the transaction coordinator, which this"
                " server was started without")
        return self._transactions

    async def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> int:
        """Kafka's AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        producer's transaction (its COMMIT or ABORT marker will be written there); the
        partition.

        Raises:
            what ``TransactionCoordinator.add_partitions_to_txn`` raises.
        """
        transactions = self._transaction_coordinator()
        # The group's partition, wherever its coordinator is: AddOffsetsToTxn goes to the
        # transaction coordinator, which in a cluster need not lead the group's partition.
        partition = partition_for_group(group_id, await self._ensure_topic())
        # In the pool: the coordinator fsyncs its state log.
        await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(
                transactions.add_partitions_to_txn, transactional_id, producer_id,
                producer_epoch, [(GROUP_METADATA_TOPIC, partition)]))
        return partition

    async def commit_transactional_offsets(
        self, request: TxnOffsetCommitRequest
    ) -> OffsetCommitResponse:
        """TxnOffsetCommit, after :meth:`check_commit` and the transaction's check that the
        group's partition is in the producer's open transaction at its epoch (AddOffsetsToTxn
        first): written in the producer's transaction, visible with its COMMIT marker.

        Raises:
            what :meth:`check_commit` and ``verify_transactional_append`` raise.
        """
        transactions = self._transaction_coordinator()
        self.check_commit(request.offsets)
        coordinator = await self._coordinator_of(request.group_id)
        # In a cluster, a group coordinator newer than the AddOffsetsToTxn asks the
        # transaction's coordinator first (server/transaction_service/append_verifier.py).
        try:
            await self._replicas.verify_transaction(
                GROUP_METADATA_TOPIC, coordinator.partition, request.transactional_id,
                request.producer_id, request.producer_epoch)
        except NotEnoughReplicasError as exc:
            # No answer now: a group request's retriable error, as Kafka's group coordinator
            # turns NOT_ENOUGH_REPLICAS into (core/src/main/scala/kafka/coordinator/group/
            # GroupMetadataManager.scala, storeOffsets).
            raise CoordinatorNotAvailableError(str(exc)) from exc
        transactions.verify_transactional_append(
            GROUP_METADATA_TOPIC, coordinator.partition, request.producer_id,
            request.producer_epoch)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.commit_transactional_offsets(
                request, token, now))

    def _marker_written(self, topic: str, partition: int, producer_id: int,
                        committed: bool) -> None:
        """The serving layer wrote a transaction marker to ``topic``-``partition`` (on the
        loop)."""
        coordinator = self.partitions.get(partition)
        if topic == GROUP_METADATA_TOPIC and coordinator is not None:
            coordinator.end_transaction(producer_id, committed)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.fetch_offsets(request, token, now))

    # ---------------------------------------------------------------- groups

    async def list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        """Every partition's groups (none before the topic exists: not created for this)."""
        listed = []
        for coordinator in list(self.partitions.values()):
            response: ListGroupsResponse = await coordinator.submit(
                lambda token, now, c=coordinator: c.core.list_groups(request, token, now))
            if response.error is not None:
                return response  # a partition still loading: the caller retries
            listed.extend(response.groups)
        return ListGroupsResponse(None, tuple(listed))

    async def describe_groups(self, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
        answers = await self._by_partition(
            request.group_ids, lambda ids: DescribeGroupsRequest(ids),
            lambda core: core.describe_groups,
            lambda response: {g.group_id: g for g in response.groups},
            DescribedGroup,
        )
        return DescribeGroupsResponse(tuple(
            answers.get(group_id) or DescribedGroup(group_id, None) for group_id in
            request.group_ids
        ))

    async def delete_offsets(self, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
        """OffsetDelete: the group's offsets of the partitions named (the core decides;
        the topics are not looked up: the offsets of a deleted topic may be deleted too)."""
        coordinator = await self._coordinator_of(request.group_id)
        return await coordinator.submit(  # type: ignore[no-any-return]
            lambda token, now: coordinator.core.delete_offsets(request, token, now))

    async def delete_groups(self, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
        answers = await self._by_partition(
            request.group_ids, lambda ids: DeleteGroupsRequest(ids),
            lambda core: core.delete_groups,
            lambda response: dict(response.results),
            lambda group_id, error: error,
        )
        return DeleteGroupsResponse(tuple((g, answers[g]) for g in request.group_ids))

    async def _by_partition(
        self,
        group_ids: tuple[str, ...],
        make: Callable[[tuple[str, ...]], Any],
        method: Callable[[Any], Callable[..., Any]],
        results: Callable[[Any], dict[str, Any]],
        refused: Callable[[str, GroupError], Any],
    ) -> dict[str, Any]:
        """Ask each partition about its groups among ``group_ids``; group id -> answer. A
        group whose partition is not led here (a cluster) is answered ``refused(group_id,
        NotCoordinatorError)``, as Kafka answers it per group."""
        if self._closed:
            raise CoordinatorNotAvailableError("the server is shutting down")
        count = await self._ensure_topic()
        by_partition: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(group_ids):
            partition = partition_for_group(group_id, count)
            by_partition.setdefault(partition, []).append(group_id)
        answers: dict[str, Any] = {}
        for partition, ids in by_partition.items():
            coordinator = self.partitions.get(partition)
            if coordinator is None:
                answers.update((g, refused(g, self._not_coordinator(g, partition))) for g in ids)
                continue
            request = make(tuple(ids))
            response = await coordinator.submit(
                lambda token, now, c=coordinator, r=request: method(c.core)(r, token, now))
            answers.update(results(response))
        return answers

    # ---------------------------------------------------------------- metrics

    def group_counts(self) -> tuple[dict[str, int], int]:
        """Groups by state name (every state, zeros included) and members in all, over the
        partitions loaded. Any thread (a scrape): each dict is copied with one ``list()``,
        atomic under the GIL, before it is read. O(groups)."""
        by_state = {state.value: 0 for state in GroupState}
        members = 0
        for coordinator in list(self.partitions.values()):
            for group in list(coordinator.core.groups.values()):
                by_state[group.state.value] += 1
                members += len(group.members)
        return by_state, members

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        """Every committed offset of the partitions loaded, as (group id, topic, partition,
        offset), for the lag metrics (server/metrics.py ``GroupLagCollector``). Any thread (a
        scrape): each table is copied with one ``list()``, atomic under the GIL, before it is
        read, one group's at a time. A partition still loading is left out (its offsets are
        not all there yet, and a scrape during a load would read them again and again).
        O(committed offsets)."""
        for coordinator in list(self.partitions.values()):
            core = coordinator.core
            if core.loading or core.closed:
                continue
            for group_id, by_partition in list(core.offsets.committed.items()):
                for (topic, partition), committed in list(by_partition.items()):
                    yield group_id, topic, partition, committed.offset

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        """The high watermark of a partition with a replica here (what a consumer can read
        up to: the lag's end), None without one. Any thread: one published int."""
        try:
            return self._replicas.log_manager.get_log(topic, partition).high_watermark
        except (UnknownTopicOrPartitionError, LogClosedError):
            return None
