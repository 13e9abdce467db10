"""The Broker servicer: broker.proto's RPCs translated to calls on the serving layer, and back.

Each RPC method, named exactly as in broker.proto, does three things: check the request's shape
(the field a bad value came in is named in the error), make one call to the partition-serving
layer, the transaction coordinator or the topic administration, and build the response message.
The methods are grouped by family, one module each: record_rpcs.py (Produce, the fetches,
Subscribe, DeleteRecords, CleanPartition), topic_rpcs.py (the topic RPCs and Metadata),
transaction_rpcs.py, group_rpcs.py (the consumer groups), security_rpcs.py (WhoAmI, ACLs); requests.py holds the request checks and
the decorator every method wears. This module puts them together, with the Session stream.

Storage semantics (validation of batches, offsets, lookups, retention, producer state, the LSO)
live in the engine; transactions in :mod:`stratalog.server.transactions`; proto <-> records
translation (records-form Produce, decoded fetches, topic descriptions) in
:mod:`stratalog.server.rpc.translation`; errors become statuses in
:mod:`stratalog.server.rpc.status`, the one place that decides them, through
:func:`~stratalog.server.rpc.requests.rpc_method`.

How a partition is served (leader and epoch checks, the append lock, where an append runs,
transaction verification, the acks=all wait, the long poll's wait and its wake-ups) is the
partition-serving layer's, :class:`stratalog.server.broker.ReplicaManager`: each RPC here makes
one call to it (docs/server.md).

Session streams (server/rpc/session.py) carry Produce, fetch and ListOffsets requests by id, each
served by this servicer's behaviour of that RPC (``produce``, ``fetch_by_offset``, ...), under
the rules of its unary call.

Concurrency: event-loop only. The coordinator's requests (they fsync its state log and write
markers), the encoding of large records-form Produce requests and the reads of topic
descriptions go to the executor given at construction; topic admin calls go through the
serving layer's admin lock, so that the LogManager sees one admin operation at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server.broker import AdminManager, ReplicaManager
from stratalog.server.byte_budget import ByteBudget
from stratalog.server.client_limits import ClientLimits
from stratalog.server.rpc.group_rpcs import GroupRpcs
from stratalog.server.rpc.quotas import RequestQuotas
from stratalog.server.rpc.reassignment_rpcs import ReassignmentRpcs
from stratalog.server.rpc.record_rpcs import RecordRpcs
from stratalog.server.rpc.requests import rpc_method
from stratalog.server.rpc.security_rpcs import SecurityRpcs
from stratalog.server.rpc.session import SessionBudgets, SessionRequests, Sessions
from stratalog.server.rpc.subscribe_messages import SharedMessages
from stratalog.server.rpc.topic_rpcs import TopicRpcs
from stratalog.server.rpc.transaction_rpcs import TransactionRpcs
from stratalog.server.rpc.translation import BadRequestError
from stratalog.server.storage.clock import wall_clock_ms
from stratalog.server.subscribe_budget import SubscribeBudget
from stratalog.server.topic_name_memo import ValidTopicNames
from stratalog.v1 import broker_pb2_grpc

if TYPE_CHECKING:
    from stratalog.server.group_service import GroupService
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.authentication import Authenticator
    from stratalog.server.security.authorizer import Authorizer
    from stratalog.server.settings import Settings
    from stratalog.server.transactions import TransactionCoordinator

__all__ = ["BadRequestError", "BrokerService"]


class BrokerService(RecordRpcs, TopicRpcs, ReassignmentRpcs, TransactionRpcs, GroupRpcs,
                    SecurityRpcs, broker_pb2_grpc.BrokerServicer):
    """broker.proto's Broker service over the partition-serving layer and the transaction
    coordinator.

    Holds the serving layer (:class:`~stratalog.server.broker.ReplicaManager`, which holds the
    LogManager and the partitions), the coordinator, the settings, the metrics, the executor
    for blocking calls, the memo of valid topic names, the limits of waiting RPCs and the
    Subscribe budget, and the Session streams.

    Shutdown: :meth:`begin_shutdown` makes waiting long polls answer with what they have and ends
    Subscribe streams with SHUTTING_DOWN (retriable), so that the server's grace period is spent on
    requests that finish, not on streams that never would. Appends in flight complete.

    Concurrency: event-loop only (grpc.aio calls every method on the loop).
    """

    def __init__(
        self,
        replica_manager: ReplicaManager,
        settings: Settings,
        metrics: ServerMetrics,
        executor: Executor,
        *,
        coordinator: TransactionCoordinator,
        time_ms: Callable[[], int] | None = None,
        topic_names: ValidTopicNames | None = None,
        limits: ClientLimits | None = None,
        subscribe_budget: SubscribeBudget | None = None,
        authorizer: Authorizer | None = None,
        session_credentials: Authenticator | None = None,
        quotas: RequestQuotas | None = None,
        groups: GroupService | None = None,
        admin: AdminManager | None = None,
    ) -> None:
        """``time_ms`` is the clock records-form Produce stamps records with (default: the
        wall clock); ``topic_names`` defaults to an empty memo of its own, ``limits`` and
        ``subscribe_budget`` to the settings' limits.
        ``authorizer`` (None: authorization is off) holds the ACLs that the ACL RPCs manage;
        it checks unary calls in its own interceptor, and each Session request here, as do
        ``quotas`` (None: none apply) and ``session_credentials`` (the authenticator that
        re-checks a Session stream's credentials for each request; None: nothing to
        re-check, there is no credential file). ``groups`` serves the consumer-group RPCs
        (None: they answer COORDINATOR_NOT_AVAILABLE). ``admin`` serves the topic RPCs
        (default: one of its own over ``replica_manager``, with ``authorizer``)."""
        self._replicas = replica_manager
        self._log_manager = replica_manager.log_manager
        self._placement = replica_manager.placement
        self._coordinator = coordinator
        self._groups = groups
        self._settings = settings
        self._admin = admin if admin is not None else AdminManager(
            replica_manager, settings, executor, authorizer=authorizer)
        #: HOST:PORT clients reach this server at (app.py sets it once the port is bound).
        self.advertised_address = settings.advertised_listen or settings.listen
        self._metrics = metrics
        self._executor = executor
        self._time_ms = time_ms if time_ms is not None else wall_clock_ms
        self._topic_names = topic_names if topic_names is not None else ValidTopicNames()
        self._limits = limits if limits is not None else ClientLimits(
            settings.waiting_rpcs_per_connection_max,
            settings.waiting_rpcs_per_client_max,
            settings.waiting_rpcs_max,
            metrics,
        )
        self._subscribe_budget = subscribe_budget if subscribe_budget is not None else (
            SubscribeBudget(settings.subscribe_buffer_bytes_total, settings.subscribe_buffer_bytes,
                            settings.subscribe_buffer_bytes_per_connection,
                            settings.subscribe_stall_ms_max)
        )
        self._shared_messages = SharedMessages()
        self._authorizer = authorizer
        self._sessions = Sessions(
            SessionRequests(self, metrics, credentials=session_credentials,
                            authorizer=authorizer, quotas=quotas),
            self._limits, metrics,
            settings.session_requests_in_flight_max,
            SessionBudgets(
                settings.session_buffer_bytes,
                ByteBudget("session_buffer_bytes_total", settings.session_buffer_bytes_total),
                settings.fetch_max_bytes_default,
                settings.fetch_max_bytes_max,
            ),
        )

    # ---------------------------------------------------------------- plumbing

    def take_held_peak_bytes(self) -> int:
        """The most memory held for Session answers and for decompression since the last call
        (twice the bytes charged: a Session answer waits beside gRPC's copy of it, and a
        decompression's output beside its pieces), for the server's heap-trim watch: a burst
        that came and went between two calls shows. Event-loop only."""
        return 2 * (self._sessions.budgets.total.take_peak_bytes()
                    + self._replicas.decompression.take_peak_bytes())

    def begin_shutdown(self) -> None:
        """Wake every waiter: long polls answer with what they have, streams end.

        Appends in flight go on (they finish within the grace period); only waiting for
        *future* appends stops. Session streams answer what they hold and end (SHUTTING_DOWN).
        """
        self._replicas.begin_shutdown()
        self._sessions.begin_shutdown()

    # ---------------------------------------------------------------- sessions

    @rpc_method(stream=True)
    async def Session(
        self, request_iterator: Any, context: grpc.aio.ServicerContext
    ) -> None:
        # Each request is served by this servicer's behaviour of its RPC, under the rules of
        # its unary call (server/rpc/session.py); the stream only carries them.
        await self._sessions.serve(context)
