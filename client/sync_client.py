"""The blocking client: the same methods as :class:`~stratalog.client.Client`, without asyncio.

For scripts, the command line, Spark tasks and threads. It sits on gRPC's own synchronous
channel (``grpc.insecure_channel``), whose calls block the calling thread inside the gRPC core;
no event loop runs in a background thread, so it works in programs that run an event loop of
their own, and in forked workers. Requests and responses go through the same
:mod:`stratalog.client.wire` functions as the async client, so arguments are checked the same way
and results are the same values; errors are the same :mod:`stratalog.client.errors` classes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc

from stratalog.records import Compression
from stratalog.v1 import broker_pb2, broker_pb2_grpc

from . import wire
from .acls import AclBinding, AclBindingFilter
from .client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_TIMEOUT_S,
    channel_options,
    check_timeout,
    log_throttle,
)
from .credentials import Credentials, TlsConfig, channel_security
from .errors import BrokerUnavailableError, from_rpc_error
from .types import (
    CleaningResult,
    ClusterMetadata,
    FetchResult,
    Identity,
    OffsetAndTimestamp,
    ProduceResult,
    ProducerIdAndEpoch,
    ProducerRecord,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
)
from .wire import FetchFormat, IsolationLevel

__all__ = ["SyncClient"]

_UNSET: Any = object()


class SyncClient:
    """A blocking connection to one stratalog server: every RPC of the Broker service.

    Holds one synchronous gRPC channel and the default deadline. Thread-safe: gRPC channels
    may be shared by threads, and the client keeps no other state. Use it as
    ``with SyncClient(target) as client:`` or call :meth:`close`. Arguments and results are
    those of :class:`~stratalog.client.Client`.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        tls: TlsConfig | None = None,
        auth: Credentials | None = None,
    ) -> None:
        if not isinstance(target, str) or not target:
            raise TypeError("target must be a non-empty str such as '127.0.0.1:50051'")
        self._target = target
        self._timeout_s = check_timeout(timeout_s)
        credentials, tls_options, self._metadata = channel_security(
            target, tls, auth, credentials
        )
        channel_args = channel_options(max_message_bytes, [*tls_options, *options])
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=channel_args)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=channel_args)
        self._stub = broker_pb2_grpc.BrokerStub(self._channel)

    @property
    def target(self) -> str:
        """The target string the channel was opened with."""
        return self._target

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel; calls still running end with a cancelled error."""
        self._channel.close()

    def wait_ready(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Block until the channel is connected; ``BrokerUnavailableError`` after ``timeout_s``."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            raise BrokerUnavailableError(
                f"no connection to {self._target} within {timeout_s} s",
                code=grpc.StatusCode.UNAVAILABLE,
            ) from None

    def _deadline(self, timeout_s: Any, extra_ms: int = 0) -> float | None:
        timeout = self._timeout_s if timeout_s is _UNSET else check_timeout(timeout_s)
        if timeout is None:
            return None
        return timeout + extra_ms / 1000.0

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err

    # --- topics ----------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """See :meth:`Client.create_topic <stratalog.client.Client.create_topic>`."""
        request = wire.create_topic_request(name, partitions, configs)
        response = self._call(self._stub.CreateTopic, request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    def delete_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> None:
        """See :meth:`Client.delete_topic <stratalog.client.Client.delete_topic>`."""
        request = wire.delete_topic_request(name)
        self._call(self._stub.DeleteTopic, request, self._deadline(timeout_s))

    def list_topics(self, *, timeout_s: float | None = _UNSET) -> list[TopicInfo]:
        """See :meth:`Client.list_topics <stratalog.client.Client.list_topics>`."""
        response = self._call(
            self._stub.ListTopics, broker_pb2.ListTopicsRequest(), self._deadline(timeout_s)
        )
        return sorted((wire.topic_info(t) for t in response.topics), key=lambda t: t.name)

    def describe_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> TopicInfo:
        """See :meth:`Client.describe_topic <stratalog.client.Client.describe_topic>`."""
        request = wire.describe_topic_request(name)
        response = self._call(self._stub.DescribeTopic, request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    def alter_topic_configs(
        self,
        name: str,
        set: Mapping[str, str] | None = None,  # the RPC field names, shadowing is harmless
        delete: Sequence[str] = (),
        *,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """See :meth:`Client.alter_topic_configs <stratalog.client.Client.alter_topic_configs>`."""
        request = wire.alter_topic_configs_request(name, set, delete)
        response = self._call(self._stub.AlterTopicConfigs, request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    # --- records ---------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[ProducerRecord | bytes] | None = None,
        *,
        record_batches: bytes | None = None,
        compression: Compression | str = Compression.NONE,
        flush: bool = False,
        producer_id: int | None = None,
        producer_epoch: int = 0,
        base_sequence: int = 0,
        transactional: bool = False,
        acks: int | str = -1,
        timeout_s: float | None = _UNSET,
    ) -> ProduceResult:
        """See :meth:`Client.produce <stratalog.client.Client.produce>`."""
        request = wire.produce_request(
            topic, partition, records, record_batches, compression, flush,
            producer_id, producer_epoch, base_sequence, transactional, acks,
        )
        response = self._call(self._stub.Produce, request, self._deadline(timeout_s))
        log_throttle("produce to", topic, partition, response.throttle_time_ms)
        return wire.produce_result(response)

    def fetch_by_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 0,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        fetch_format: FetchFormat = FetchFormat.RECORDS,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        max_records: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> FetchResult:
        """See :meth:`Client.fetch_by_offset <stratalog.client.Client.fetch_by_offset>`."""
        request = wire.fetch_by_offset_request(
            topic, partition, offset, max_bytes, max_wait_ms, min_bytes, fetch_format,
            isolation_level, max_records,
        )
        response = self._call(
            self._stub.FetchByOffset, request, self._deadline(timeout_s, max_wait_ms)
        )
        log_throttle("fetch from", topic, partition, response.throttle_time_ms)
        return wire.fetch_result(response, by_timestamp=False)

    def fetch_by_timestamp(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        *,
        max_bytes: int = 0,
        fetch_format: FetchFormat = FetchFormat.RECORDS,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        max_records: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> FetchResult:
        """See :meth:`Client.fetch_by_timestamp <stratalog.client.Client.fetch_by_timestamp>`."""
        request = wire.fetch_by_timestamp_request(
            topic, partition, timestamp_ms, max_bytes, fetch_format, isolation_level,
            max_records,
        )
        response = self._call(self._stub.FetchByTimestamp, request, self._deadline(timeout_s))
        log_throttle("fetch from", topic, partition, response.throttle_time_ms)
        return wire.fetch_result(response, by_timestamp=True)

    def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_s: float | None = _UNSET,
    ) -> OffsetAndTimestamp:
        """See :meth:`Client.list_offsets <stratalog.client.Client.list_offsets>`."""
        request = wire.list_offsets_request(topic, partition, timestamp_ms, isolation_level)
        response = self._call(self._stub.ListOffsets, request, self._deadline(timeout_s))
        return wire.offset_and_timestamp(response)

    def subscribe(
        self,
        topic: str,
        partition: int,
        *,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        max_bytes: int = 0,
        fetch_format: FetchFormat = FetchFormat.RECORDS,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_s: float | None = None,
    ) -> Iterator[FetchResult]:
        """See :meth:`Client.subscribe <stratalog.client.Client.subscribe>`.

        A generator; closing it (``close()``, ``break`` then garbage collection, or leaving a
        ``with contextlib.closing(...)`` block) cancels the stream.
        """
        # Checked here, before the generator starts, so a bad argument raises at the call.
        request = wire.subscribe_request(
            topic, partition, offset, timestamp_ms, max_bytes, fetch_format, isolation_level
        )
        deadline = check_timeout(timeout_s)
        return self._stream(request, deadline, by_timestamp=timestamp_ms is not None)

    def _stream(
        self, request: broker_pb2.SubscribeRequest, timeout: float | None, *, by_timestamp: bool
    ) -> Iterator[FetchResult]:
        call = self._stub.Subscribe(request, timeout=timeout, metadata=self._metadata)
        try:
            for response in call:
                log_throttle("subscription to", request.topic, request.partition,
                             response.throttle_time_ms)
                yield wire.fetch_result(response, by_timestamp=by_timestamp)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err
        finally:
            call.cancel()

    def delete_records(
        self,
        topic: str,
        partition: int,
        before_offset: int,
        *,
        timeout_s: float | None = _UNSET,
    ) -> int:
        """See :meth:`Client.delete_records <stratalog.client.Client.delete_records>`."""
        request = wire.delete_records_request(topic, partition, before_offset)
        response = self._call(self._stub.DeleteRecords, request, self._deadline(timeout_s))
        return response.log_start_offset

    def clean_partition(
        self, topic: str, partition: int, *, timeout_s: float | None = _UNSET
    ) -> CleaningResult:
        """See :meth:`Client.clean_partition <stratalog.client.Client.clean_partition>`."""
        request = wire.clean_partition_request(topic, partition)
        response = self._call(self._stub.CleanPartition, request, self._deadline(timeout_s))
        return wire.cleaning_result(topic, partition, response)

    # --- exactly-once ----------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None = None,
        *,
        transaction_timeout_ms: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> ProducerIdAndEpoch:
        """See :meth:`Client.init_producer_id <stratalog.client.Client.init_producer_id>`."""
        request = wire.init_producer_id_request(transactional_id, transaction_timeout_ms)
        response = self._call(self._stub.InitProducerId, request, self._deadline(timeout_s))
        return wire.producer_id_and_epoch(response)

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition | tuple[str, int]],
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """See :meth:`Client.add_partitions_to_txn
        <stratalog.client.Client.add_partitions_to_txn>`."""
        request = wire.add_partitions_to_txn_request(
            transactional_id, producer_id, producer_epoch, partitions
        )
        self._call(self._stub.AddPartitionsToTxn, request, self._deadline(timeout_s))

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """See :meth:`Client.end_txn <stratalog.client.Client.end_txn>`."""
        request = wire.end_txn_request(transactional_id, producer_id, producer_epoch, commit)
        self._call(self._stub.EndTxn, request, self._deadline(timeout_s))

    def describe_transaction(
        self, transactional_id: str, *, timeout_s: float | None = _UNSET
    ) -> TransactionDescription:
        """See :meth:`Client.describe_transaction
        <stratalog.client.Client.describe_transaction>`."""
        request = wire.describe_transaction_request(transactional_id)
        response = self._call(self._stub.DescribeTransaction, request, self._deadline(timeout_s))
        return wire.transaction_description(response)

    # --- security --------------------------------------------------------------------------------

    def who_am_i(self, *, timeout_s: float | None = _UNSET) -> Identity:
        """See :meth:`Client.who_am_i <stratalog.client.Client.who_am_i>`."""
        response = self._call(
            self._stub.WhoAmI, broker_pb2.WhoAmIRequest(), self._deadline(timeout_s)
        )
        return Identity(response.principal, response.authenticated_by, response.host)

    # --- cluster ---------------------------------------------------------------------------------

    def metadata(
        self, topics: Sequence[str] = (), *, timeout_s: float | None = _UNSET
    ) -> ClusterMetadata:
        """See :meth:`Client.metadata <stratalog.client.Client.metadata>`."""
        response = self._call(
            self._stub.Metadata, wire.metadata_request(topics), self._deadline(timeout_s)
        )
        return wire.cluster_metadata(response)

    # --- ACLs ------------------------------------------------------------------------------------

    def create_acls(
        self, bindings: Sequence[AclBinding], *, timeout_s: float | None = _UNSET
    ) -> None:
        """See :meth:`Client.create_acls <stratalog.client.Client.create_acls>`."""
        request = wire.create_acls_request(bindings)
        self._call(self._stub.CreateAcls, request, self._deadline(timeout_s))

    def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """See :meth:`Client.delete_acls <stratalog.client.Client.delete_acls>`."""
        request = wire.delete_acls_request(filters)
        response = self._call(self._stub.DeleteAcls, request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.deleted]

    def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """See :meth:`Client.describe_acls <stratalog.client.Client.describe_acls>`."""
        request = wire.describe_acls_request(
            AclBindingFilter() if acl_filter is None else acl_filter
        )
        response = self._call(self._stub.DescribeAcls, request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.acls]
