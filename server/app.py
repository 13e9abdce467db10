"""The running server: LogManager, grpc.aio on uvloop, health, reflection, metrics, maintenance.

Life of a server process (``stratalog serve``)::

    with pid_file set: write the pid file and hold it locked (server/pid_file.py); another live
        server holding it: exit 1, before anything else is touched
    check that the listen (and metrics) port is free: a busy port is one line of ours, and
        leaves no data directory behind (the metrics port only when set: the default, 9464,
        gives way to any free port when another server on this machine holds it)
    raise the soft RLIMIT_NOFILE to the hard one; lower the descriptor reservations the user
        did not set when the limit is low (server/open_files_fit.py, one warning)
    open the LogManager (locks the log dirs, recovers after an unclean shutdown), its share of
        RLIMIT_NOFILE computed after the connection caps (max_connections,
        metrics_connections_max, kafka_connections_max: open_files_fit.connections_reserved)
    open the TransactionCoordinator: replay __transaction_state (without recovery where the
        directory's clean-shutdown marker was found), complete the commits and aborts a crash
        left half-written (their markers go to the LogManager's partitions); with --cluster,
        wrap it in the ClusterTransactions (server/transaction_service/: transactional ids on
        the leaders of __cluster_transaction_state's partitions, told of leadership by the
        replica roles, with the TransactionMarkers service registered beside Replication)
    load the TLS files and the credential file (server/security/), if configured
    with --cluster, before the logs open: connect to etcd (TLS and etcd credentials as
        configured), grant the lease and keep it alive (server/cluster/node.py's connect);
        etcd unreachable, a TLS failure or credentials etcd refuses: exit 1, each named
    with authorizer = "acl": read the ACL file (server/security/acl_store.py); with --cluster
        the cluster's ACLs in etcd instead, after importing or checking the ACL file
        (server/cluster/cluster_acls.py), followed by a poll from then on
    build grpc.aio server: the interceptors (authentication, then authorization and quotas),
        Broker + grpc.health.v1 (SERVING) + reflection; bind (TLS when configured); start the
        group coordinators (server/group_service/: an existing __consumer_offsets loads in
        the background; the topic is created by the first group request); start
    log the banner (server/startup_banner.py; every setting only at DEBUG), then print
        "stratalog: listening on HOST:PORT" (the bound port when asked for port 0)
    with --cluster: with broker_principals (or TLS), ask itself who it is to its peers (WhoAmI
        over its inter-broker channel; server/cluster/broker_identity.py); join the cluster
        (server/cluster/node.py: register under an etcd lease,
        take part in the controller election); etcd unreachable or the node id taken: exit 1;
        then start the replica roles (server/cluster/replica_roles.py): the replicas
        become leaders and followers as etcd says (the Replication service, registered with
        the Broker service in cluster mode, serves the followers' fetches)
    start the Prometheus endpoint on the event loop (server/metrics_endpoint.py: capped
        connections, timeouts, optional authentication) and the maintenance task
    ... serve until SIGTERM or SIGINT; SIGHUP reloads the TLS files and the credential
        file (new connections and calls use them; open connections keep working), and reads
        the settings again for the byte-rate quotas (server/security/quotas.py) ...
    with --cluster: the controlled shutdown, still serving (server/cluster/controlled_shutdown.py:
        the leaderships moved to other in-sync replicas, at most controlled_shutdown_timeout_ms)
    health NOT_SERVING; long polls answer, Subscribe streams end (SHUTTING_DOWN), parked
        JoinGroups and SyncGroups answer NOT_COORDINATOR
    grpc stop(grace): no new RPCs; in-flight ones get shutdown_grace_ms, then are cancelled
    with --cluster: stop the replica fetchers and the polls, then revoke the etcd lease (the
        registration and the controller key go at once)
    stop the maintenance task (a pass under way finishes)
    TransactionCoordinator.close(), then LogManager.close(): flush, checkpoints,
        clean-shutdown markers, unlock; remove the pid file                   -> exit 0

The maintenance task calls ``LogManager.run_maintenance`` (flush.ms flushes, retention,
checkpoints, delayed deletions; each pass bounded) in the thread pool every
``maintenance_interval_ms``, then refreshes the log-size metrics, then
``TransactionCoordinator.run_maintenance`` (aborts transactions open past their timeout,
forgets expired transactional ids, retries markers that failed; each job at its own interval).
A failing pass is logged and the next one runs on schedule.

The partition-serving layer (server/broker/: ReplicaManager) is made right after the LogManager;
the coordinator writes its transaction markers through it
(:meth:`~stratalog.server.broker.ReplicaManager.write_txn_markers`), as every other writer does,
and the Broker servicer and, in cluster mode, the replica roles sit on it.

The lines printed on stdout are an interface: tests and scripts read the bound ports from
them (``listening on``, ``metrics on``, then ``kafka on``: the Kafka listener, server/kafka/).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from stratalog.server.allocator import TrimWatch, limit_arenas, trim_heap, tune_allocator
from stratalog.server.broker import AdminManager, ReplicaManager
from stratalog.server.client_limits import WAITING_RPC_BYTES_ESTIMATE, ClientLimits
from stratalog.server.garbage_collector import freeze_loaded_objects, set_young_objects_max
from stratalog.server.group_service import GroupService
from stratalog.server.metrics import ServerMetrics
from stratalog.server.metrics_endpoint import MetricsEndpoint, MetricsEndpointLimits
from stratalog.server.open_files_fit import connections_reserved, fit_to_open_files_limit
from stratalog.server.pid_file import PidFile, PidFileError
from stratalog.server.rpc.authentication import AuthenticationInterceptor
from stratalog.server.rpc.authorization import AuthorizationInterceptor
from stratalog.server.rpc.decoding import add_broker_service
from stratalog.server.rpc.metrics_interceptor import MetricsInterceptor
from stratalog.server.rpc.quotas import QuotaInterceptor, RequestQuotas
from stratalog.server.rpc.service import BrokerService
from stratalog.server.security.acl_store import AclStorage, AclStore
from stratalog.server.security.authentication import Authenticator
from stratalog.server.security.authorizer import Authorizer
from stratalog.server.security.credentials import CredentialFile
from stratalog.server.security.errors import SecurityConfigError
from stratalog.server.security.quotas import ProduceAdmission, QuotaConfig, QuotaManager
from stratalog.server.security.tls import ServerTls, TlsFiles
from stratalog.server.settings import (
    Address,
    Settings,
    SettingsError,
    configure_logging,
    describe,
    parse_address,
    reload_settings,
)
from stratalog.server.startup_banner import ServingFacts, banner_lines
from stratalog.server.startup_checks import (
    StartupError,
    check_ports_free,
    out_of_descriptors,
    raise_open_files_limit,
)
from stratalog.server.storage.errors import StorageIOError
from stratalog.server.storage.meta_properties import META_PROPERTIES_FILE
from stratalog.server.subscribe_budget import MESSAGE_COPIES_HELD, SubscribeBudget
from stratalog.server.thread_priority import lower_current_thread_priority
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.cluster.cluster_acls import EtcdAclStore
    from stratalog.server.cluster.node import ClusterNode
    from stratalog.server.cluster.peer_channels import PeerChannels
    from stratalog.server.cluster.replica_roles import ReplicaRoles
    from stratalog.server.cluster.session import EtcdSession
    from stratalog.server.cluster.stray_logs import StrayLogs
    from stratalog.server.kafka import KafkaListener
    from stratalog.server.rpc.replication_service import ReplicationService
    from stratalog.server.storage.log_manager import LogManager
    from stratalog.server.transaction_service import ClusterTransactions
    from stratalog.server.transactions import TransactionCoordinator

__all__ = ["SERVICE_NAME", "Server", "StartupError", "main", "run"]

logger = logging.getLogger(__name__)

#: When the memory held for waiting RPCs and Subscribe messages fell this much below its peak,
#: the maintenance task gives the C allocator's free memory back (allocator.trim_heap): e.g.
#: after 1,000 stalled subscribers went away, about 110 MiB.
TRIM_AFTER_FALL_BYTES = 32 * 1024 * 1024

#: The Broker service's full name, as health checks and reflection know it.
SERVICE_NAME = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name



class Server:
    """One stratalog server: the LogManager and everything that serves it.

    Holds the settings, the LogManager and the TransactionCoordinator (from :meth:`start` to
    :meth:`stop`), the grpc.aio server, the health servicer, the metrics and their HTTP
    endpoint, the thread pool for blocking calls and the maintenance task.

    Crash behaviour: anything not flushed when the process dies is recovered by the LogManager
    at the next start (Kafka's recovery after an unclean shutdown); :meth:`stop` is what makes a
    shutdown clean.

    Concurrency: event-loop only; :meth:`start` and :meth:`stop` once each, in that order.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = ServerMetrics(group_lag_max_series=settings.group_lag_metrics_max_series)
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.log_manager: LogManager | None = None
        # In cluster mode the ClusterTransactions over the local coordinator.
        self.coordinator: TransactionCoordinator | ClusterTransactions | None = None
        self.cluster_node: ClusterNode | None = None  # with --cluster, from start() to stop()
        # With --cluster: the etcd session from before the logs open until stop(), and with
        # authorizer = "acl" the cluster's ACLs (server/cluster/cluster_acls.py).
        self.etcd_session: EtcdSession | None = None
        self._cluster_acls: EtcdAclStore | None = None
        #: The partition-serving layer, from the LogManager's opening to stop().
        self.replica_manager: ReplicaManager | None = None
        self.replica_roles: ReplicaRoles | None = None  # with --cluster, once joined
        self.stray_logs: StrayLogs | None = None  # with --cluster, once joined
        #: The consumer groups' coordinators (server/group_service/), from _start_serving.
        self.groups: GroupService | None = None
        self.admin: AdminManager | None = None  # topic administration, both front ends
        self._replication: ReplicationService | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Each pool thread lowers its own CPU priority as it starts: the loop serves every
        # client, a pool thread one request (server/thread_priority.py).
        self._executor = ThreadPoolExecutor(
            max_workers=settings.io_threads, thread_name_prefix="stratalog-io",
            initializer=functools.partial(
                lower_current_thread_priority, settings.io_threads_nice
            ),
        )
        self._grpc: grpc.aio.Server | None = None
        #: The Kafka protocol's listener (server/kafka/), from _start_serving; None without one.
        self.kafka: KafkaListener | None = None
        self._health: health.aio.HealthServicer | None = None
        self._service: BrokerService | None = None
        self._endpoint: MetricsEndpoint | None = None  # from _start_serving
        self._maintenance: asyncio.Task[None] | None = None
        # Security (server/security/): from _load_security() until the process ends.
        self._tls: ServerTls | None = None
        self._authenticator: Authenticator | None = None
        self._auth_executor = ThreadPoolExecutor(
            max_workers=settings.authentication_threads, thread_name_prefix="stratalog-auth"
        )
        self._limits: ClientLimits | None = None
        self._subscribe_budget: SubscribeBudget | None = None
        self._trim_watch = TrimWatch(TRIM_AFTER_FALL_BYTES)
        # Authorization and quotas (server/security/): from start() until the process ends.
        self.authorizer: Authorizer | None = None
        self.quotas = QuotaManager(QuotaConfig.of_settings(settings))
        # The quotas as each request meets them (the interceptor's and the Session's), made
        # with the interceptors.
        self._request_quotas: RequestQuotas | None = None

    async def start(self) -> None:
        """Open the logs, bind and start serving.

        Raises:
            StartupError: the LogManager would not open, the transaction coordinator would not
                load its state log, or an address would not bind; what was opened is closed
                again.
        """
        from stratalog.server.storage.log_manager import LogManager
        from stratalog.server.transaction_service.opening import open_transactions

        settings = self.settings
        loop = self._loop = asyncio.get_running_loop()
        try:
            # First of all: a busy port must not cost a recovery pass, nor create the log
            # directories of a server that will not run.
            check_ports_free(settings)
        except StartupError:
            self._executor.shutdown(wait=False)
            self._auth_executor.shutdown(wait=False)
            raise
        open_files_limit = raise_open_files_limit()
        # Before the LogManager writes it: whether this server has run before (an ACL file
        # missing then means lost, server/security/acl_store.py).
        new_server = not any((Path(d) / META_PROPERTIES_FILE).exists() for d in settings.log_dirs)
        # The default descriptor reservations sized to a low limit, before anything counts on
        # them (the gRPC server's connection cap, the metrics endpoint, the LogManager).
        fit = fit_to_open_files_limit(settings, open_files_limit)
        if fit.warning is not None:
            logger.warning("%s", fit.warning)
        self.settings = settings = fit.settings
        try:
            # Before the logs: a bad certificate must not cost a recovery pass first.
            await loop.run_in_executor(self._executor, self._load_security)
        except SecurityConfigError as exc:
            self._executor.shutdown(wait=False)
            self._auth_executor.shutdown(wait=False)
            raise StartupError(str(exc)) from exc
        if settings.cluster:
            try:
                # Before the logs too: a wrong etcd setting must not cost a recovery pass.
                await self._connect_etcd()
            except StartupError:
                self._executor.shutdown(wait=False)
                self._auth_executor.shutdown(wait=False)
                raise
        try:
            self.log_manager = await loop.run_in_executor(
                self._executor,
                lambda: LogManager.open(
                    settings.log_dirs, defaults=settings.log_defaults,
                    open_files_limit=open_files_limit,
                    connections_reserved=connections_reserved(settings),
                ),
            )
        except Exception as exc:
            await self._close_etcd()
            self._executor.shutdown(wait=False)
            self._auth_executor.shutdown(wait=False)
            raise StartupError(f"cannot open the log directories {list(settings.log_dirs)}: "
                               f"{exc}") from exc
        # The state log in a directory closed cleanly opens without recovery (issue 25).
        clean_log_dirs = [path for path, clean in self.log_manager.had_clean_shutdown.items()
                          if clean]
        replica_manager = self.replica_manager = ReplicaManager(
            self.log_manager, settings, self.metrics, self._executor)
        try:
            try:
                self.coordinator = await open_transactions(
                    settings, replica_manager, self._executor, clean_log_dirs)
            except Exception as exc:
                raise StartupError(
                    "cannot load the transaction coordinator's state log (__transaction_state)"
                    f" in {list(settings.log_dirs)}: {exc}"
                ) from exc
            if settings.authorizer == "acl":
                try:
                    # After the LogManager: the ACL file lives in a log dir it has locked.
                    # In cluster mode the ACLs are etcd's: a local file is only imported,
                    # then renamed (docs/security.md, "ACLs in a cluster").
                    local = await loop.run_in_executor(
                        self._executor,
                        functools.partial(AclStore.open_to_import, settings.log_dirs)
                        if settings.cluster else functools.partial(
                            AclStore.open, settings.log_dirs, new_server=new_server,
                            create_if_missing=settings.acl_file_create_if_missing,
                        ),
                    )
                except SecurityConfigError as exc:
                    raise StartupError(str(exc)) from exc
                store: AclStorage = (
                    await self._open_cluster_acls(local) if settings.cluster else local
                )
                self.authorizer = Authorizer(
                    store,
                    # In cluster mode the servers' own principals are super users, as
                    # Kafka's operators make the inter-broker principal one (docs/cluster.md).
                    super_users=(*settings.super_users,
                                 *(settings.broker_principals if settings.cluster else ())),
                    allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
                    cache_entries_max=settings.authorizer_cache_entries_max,
                    cache_bytes_max=settings.authorizer_cache_bytes_max,
                    bindings_max=settings.acl_bindings_max,
                    request_entries_max=settings.acl_request_entries_max,
                    executor=self._executor,
                )
            elif not settings.cluster:
                # An empty ACL file from the first start on, authorizer or not: turning the
                # authorizer on later finds it, so a missing file always means a lost one.
                try:
                    await loop.run_in_executor(
                        self._executor, AclStore.keep_ready, settings.log_dirs)
                except StorageIOError as exc:
                    logger.warning("could not write an empty ACL file for later: %s", exc)
            await self._start_serving()
        except BaseException:
            await self._close_everything()
            raise

    async def _start_serving(self) -> None:
        assert self.log_manager is not None
        settings = self.settings
        address = settings.listen_address
        interceptors = self._interceptors()
        self._grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_request_bytes),
                ("grpc.max_send_message_length", settings.max_response_bytes),
                # Without this, a second server could bind the same port and steal half the
                # connections; a port in use must fail the start.
                ("grpc.so_reuseport", 0),
                *client_limit_options(settings),
            ],
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
            interceptors=interceptors,
        )
        assert self.coordinator is not None
        limits = self._limits = ClientLimits(
            settings.waiting_rpcs_per_connection_max,
            settings.waiting_rpcs_per_client_max,
            settings.waiting_rpcs_max,
            self.metrics,
        )
        budget = self._subscribe_budget = SubscribeBudget(
            settings.subscribe_buffer_bytes_total, settings.subscribe_buffer_bytes,
            settings.subscribe_buffer_bytes_per_connection, settings.subscribe_stall_ms_max,
        )
        # Read by the scrape thread: one int, read whole.
        self.metrics.subscribe_buffer_bytes.set_function(lambda: budget.in_use_bytes)
        assert self._authenticator is not None and self.replica_manager is not None
        self.replica_manager.verify_transactions_with(self.coordinator)
        self.groups = GroupService(self.replica_manager, settings, self._executor,
                                   metrics=self.metrics, transactions=self.coordinator)
        self.metrics.bind_groups(self.groups.group_counts)
        self.metrics.bind_group_lag(self.groups.committed_offsets, self.groups.log_end_offset)
        self.admin = AdminManager(self.replica_manager, settings, self._executor,
                                  authorizer=self.authorizer)
        self._service = BrokerService(
            self.replica_manager, settings, self.metrics, self._executor,
            coordinator=self.coordinator, admin=self.admin,
            limits=limits, subscribe_budget=budget, authorizer=self.authorizer,
            # A Session request is served under the rules of its unary call; who the caller
            # is was decided once, when its stream was authenticated, but re-checked against
            # the credential file in force (a reload may have removed its user): issue 24,
            # finding 11. Without a credential file no identity carries credentials to
            # re-check (Authenticator.still_valid is True for all) and a reload loads none.
            session_credentials=(self._authenticator
                                 if settings.authentication_credentials_file else None),
            quotas=self._request_quotas,
            groups=self.groups,
        )
        add_broker_service(self._service, self._grpc)
        if settings.cluster:
            # The server-to-server Replication service (replication.proto), cluster mode only;
            # it answers NOT_LEADER_OR_FOLLOWER until the replica manager starts.
            from stratalog.server.cluster.broker_identity import BrokerIdentity
            from stratalog.server.rpc.replication_service import (
                ReplicationService,
                add_replication_service,
            )

            self._replication = ReplicationService(
                self._executor, BrokerIdentity(settings.broker_principals),
                settings.read_in_executor_min_bytes)
            add_replication_service(self._replication, self._grpc)
            # The transaction coordinators' markers and produce permissions (issue 29).
            from stratalog.server.rpc.transaction_markers_service import (
                TransactionMarkersService,
            )
            from stratalog.server.transaction_service import ClusterTransactions
            from stratalog.v1 import transaction_markers_pb2_grpc

            markers = TransactionMarkersService(BrokerIdentity(settings.broker_principals))
            if isinstance(self.coordinator, ClusterTransactions):
                markers.calls = self.coordinator.calls
            transaction_markers_pb2_grpc.add_TransactionMarkersServicer_to_server(
                markers, self._grpc)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._grpc
        )
        try:
            # gRPC logs its own line for a failed bind (E1125 ... add_port.cc:83 ...) on the
            # process's stderr: kept back when the bind fails, as the error below says it.
            with _grpc_log_kept_on_failure():
                if self._tls is not None:
                    self.port = self._grpc.add_secure_port(
                        str(address), self._tls.grpc_credentials())
                else:
                    self.port = self._grpc.add_insecure_port(str(address))
        except RuntimeError as exc:
            # gRPC says "Failed to bind" for any failure to make the socket, a process out of
            # descriptors included: say so when that is the cause.
            raise StartupError(
                f"cannot listen on {address}: {out_of_descriptors() or exc}"
            ) from exc
        self._service.advertised_address = self.advertised_address()
        # Before the first request: an existing __consumer_offsets loads in the background
        # (requests meanwhile are COORDINATOR_LOAD_IN_PROGRESS).
        await self.groups.start()
        await self._grpc.start()
        if settings.kafka_listen:
            await self._start_kafka()
        if settings.cluster:
            await self._join_cluster()
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if settings.metrics_port >= 0:
            self._endpoint = MetricsEndpoint(
                self.metrics, metrics_endpoint_limits(settings), self._authenticator
            )
            try:
                self.metrics_port = await self._start_metrics(settings.metrics_port)
            except OSError as exc:
                if (exc.errno != errno.EADDRINUSE or settings.metrics_port == 0
                        or settings.given("metrics_port")):
                    raise StartupError(
                        f"cannot serve metrics on {settings.metrics_listen_host}:"
                        f"{settings.metrics_port}: {exc}"
                    ) from exc
                # The default port, taken: most often by another server on this machine (a
                # local cluster). Nobody asked for this port, so one that is free serves; the
                # printed "metrics on" line says which.
                self.metrics_port = await self._start_metrics(0)
                logger.warning(
                    "the default metrics port %d is in use on %s (another server on this"
                    " machine?): serving the metrics on port %d instead; set metrics_port to"
                    " choose one", settings.metrics_port, settings.metrics_listen_host,
                    self.metrics_port,
                )
        self._refresh_log_metrics()
        self.metrics.bind_cleaner(self.log_manager)
        # The log cleaner's threads (log.cleaner.threads; none with log.cleaner.enable=false):
        # the maintenance task below drives the other background jobs, the cleaner runs on its
        # own schedule (log.cleaner.backoff.ms) and stops in LogManager.close.
        log_manager = self.log_manager
        if await asyncio.get_running_loop().run_in_executor(
            self._executor, log_manager.start_cleaner
        ):
            logger.info("log cleaner started (log.cleaner.threads=%s)",
                        settings.log_defaults.get("log.cleaner.threads", "1"))
        self._maintenance = asyncio.create_task(self._maintain(), name="stratalog-maintenance")

    async def _start_kafka(self) -> None:
        """Bind the Kafka listener over the same serving layer, coordinators and security as
        the gRPC service. A default port that is taken gives way to a free one (printed), as
        the metrics port does; a port someone chose must bind."""
        from stratalog.server.kafka import KafkaListener, KafkaServices
        from stratalog.server.storage.meta_properties import read_meta_properties

        assert self.replica_manager and self.log_manager and self.groups and self.coordinator
        assert self._limits is not None
        settings = self.settings
        services = KafkaServices(
            self.replica_manager, self.log_manager, self.groups, self.coordinator, settings,
            self.metrics, self._executor, self._limits, self.quotas, self.authorizer,
            advertised=lambda: listener.advertised(),
            time_ms=lambda: int(time.time() * 1000), admin=self.admin,
            # Each server of a cluster made its own meta.properties' cluster.id, so none of
            # them is the cluster's: a cluster answers etcd's (KafkaServices.
            # current_cluster_id; server/cluster/cluster_id.py).
            cluster_id=None if settings.cluster else getattr(
                read_meta_properties(Path(settings.log_dirs[0])), "cluster_id", None),
            kafka_brokers=self._kafka_brokers if settings.cluster else None,
            kafka_racks=self._kafka_racks if settings.cluster else None,
            authenticator=self._authenticator,
        )
        listener = self.kafka = KafkaListener(
            services, self._tls.listener_context() if self._tls is not None else None)
        self.metrics.kafka_request_bytes.set_function(lambda: listener.budget.in_use_bytes)
        try:
            await listener.start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or settings.given("kafka_listen"):
                raise StartupError(f"cannot listen for Kafka clients on {settings.kafka_listen}:"
                                   f" {exc}") from exc
            await listener.start(port=0)
            logger.warning("the default Kafka port %d is in use on %s: serving Kafka clients on"
                           " port %d instead; set kafka_listen to choose one",
                           listener.address.port, listener.address.host, listener.port)

    def _kafka_brokers(self) -> dict[int, Address]:
        """In cluster mode, node id -> Kafka address of every live server that registered one
        (server/cluster/membership.py); before this server joined, none is known."""
        node = self.cluster_node
        if node is None:
            return {}
        brokers = {}
        for broker in node.brokers:
            if broker.kafka_address:
                try:
                    brokers[broker.node_id] = parse_address(broker.kafka_address)
                except ValueError:  # a registration this version cannot read: not reachable
                    continue
        return brokers

    def _kafka_racks(self) -> dict[int, str]:
        """In cluster mode, node id -> rack of every live server that registered one."""
        node = self.cluster_node
        return {} if node is None else {b.node_id: b.rack for b in node.brokers if b.rack}

    async def _start_metrics(self, port: int) -> int:
        """Start the metrics endpoint on ``port`` of the metrics host; the port bound.

        Raises:
            OSError: the port cannot be bound (EADDRINUSE: taken).
        """
        settings = self.settings
        assert self._endpoint is not None
        return await self._endpoint.start(
            settings.metrics_listen_host, port,
            None if self._tls is None else _context_source(self._tls),
            client_certificates=settings.tls_client_auth == "required",
        )

    # ---------------------------------------------------------------- cluster

    def advertised_address(self) -> str:
        """HOST:PORT other servers and clients reach this one at: ``advertised_listen``, else
        the listen host (this host's name for a wildcard address) and the bound port."""
        settings = self.settings
        if settings.advertised_listen:
            return settings.advertised_listen
        host = settings.listen_address.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        return str(Address(host, self.port or 0))

    async def _connect_etcd(self) -> None:
        """Connect to etcd and keep this server's lease alive (server/cluster/node.py's
        connect). Raises StartupError naming the cause: etcd unreachable, a TLS failure,
        credentials etcd refused, or an etcd setting's file that does not read."""
        from stratalog.server.cluster.errors import ClusterError
        from stratalog.server.cluster.etcd_client import EtcdSecurity
        from stratalog.server.cluster.node import connect

        settings = self.settings
        try:
            security = await asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: EtcdSecurity.load(
                    settings.cluster, ca_file=settings.etcd_ca_file,
                    cert_file=settings.etcd_cert_file, key_file=settings.etcd_key_file,
                    username=settings.etcd_username,
                    password_file=settings.etcd_password_file,
                ),
            )
            if security.username and not security.tls:
                logger.warning("etcd_username is set with a plaintext etcd:// URL: the password"
                               " and etcd's token cross the network readable; use etcds://")
            self.etcd_session = await connect(
                settings.cluster, settings.cluster_prefix, settings.cluster_session_timeout_ms,
                security,
            )
        except ClusterError as exc:
            raise StartupError(f"cannot join the cluster {settings.cluster}: {exc}") from exc

    async def _open_cluster_acls(self, local: AclStore) -> EtcdAclStore:
        """The cluster's ACLs in etcd, this node's ACL file imported or checked, followed from
        now on (server/cluster/cluster_acls.py). Raises StartupError."""
        from stratalog.server.cluster.cluster_acls import EtcdAclStore
        from stratalog.server.cluster.errors import ClusterError
        from stratalog.server.cluster.layout import ClusterKeys

        settings = self.settings
        assert self.etcd_session is not None
        try:
            store = await EtcdAclStore.open(
                self.etcd_session, ClusterKeys(settings.cluster_prefix),
                settings.cluster_poll_fallback_ms / 1000, local, self._executor,
                watch=settings.cluster_watches_enable,
            )
        except ClusterError as exc:
            raise StartupError(f"cannot join the cluster {settings.cluster}: {exc}") from exc
        store.start()
        self._cluster_acls = store
        return store

    async def _close_etcd(self) -> None:
        """Stop following the cluster's ACLs, then close the etcd session (revoke the lease)."""
        acls, self._cluster_acls = self._cluster_acls, None
        if acls is not None:
            await acls.close()
        session, self.etcd_session = self.etcd_session, None
        if session is not None:
            await session.close()

    async def _join_cluster(self) -> None:
        """Find out who this server is to its peers (with broker_principals set), register in
        etcd and take part in the controller election (server/cluster/node.py). Raises
        StartupError when the inter-broker security does not work, etcd does not answer or
        the node id is taken."""
        import aetcd

        from stratalog.server.cluster.errors import ClusterError
        from stratalog.server.cluster.node import ClusterNode
        from stratalog.server.cluster.peer_channels import PeerChannels

        settings = self.settings
        address = self.advertised_address()
        assert self.etcd_session is not None
        loop = asyncio.get_running_loop()
        try:
            peers = await loop.run_in_executor(self._auth_executor, PeerChannels.open, settings)
        except SecurityConfigError as exc:
            raise StartupError(str(exc)) from exc
        try:
            principal = await self._own_principal(peers, address)
            try:
                self.cluster_node = await ClusterNode.start(
                    self.etcd_session, settings.cluster_prefix, settings.node_id, address,
                    unclean_leader_election_enable=settings.unclean_leader_election_enable,
                    principal=principal,
                    kafka_address=str(self.kafka.advertised()) if self.kafka is not None else "",
                    rack=settings.broker_rack,
                    auto_leader_rebalance_enable=settings.auto_leader_rebalance_enable,
                    leader_imbalance_check_interval_s=(
                        settings.leader_imbalance_check_interval_seconds),
                    leader_imbalance_per_broker_percentage=(
                        settings.leader_imbalance_per_broker_percentage),
                    poll_fallback_ms=settings.cluster_poll_fallback_ms,
                    watches_enable=settings.cluster_watches_enable,
                )
            except (TimeoutError, aetcd.ClientError, OSError) as exc:
                raise StartupError(f"cannot join the cluster {settings.cluster}: etcd"
                                   f" {self.etcd_session.endpoint} stopped answering:"
                                   f" {exc or type(exc).__name__}") from exc
            except ClusterError as exc:
                raise StartupError(f"cannot join the cluster {settings.cluster}: {exc}") from exc
        except BaseException:
            await peers.close()
            raise
        logger.info("joined the cluster %s as node %d at %s%s; controller: node %d, epoch %d",
                    settings.cluster, settings.node_id, address,
                    f" (principal {principal})" if principal else "",
                    *self.cluster_node.controller)
        await self._start_replication(peers)

    async def _own_principal(self, peers: PeerChannels, address: str) -> str:
        """Who this server is to its peers (server/cluster/broker_identity.py); "" when
        replication is not authenticated. Raises StartupError naming what is wrong."""
        from stratalog.server.cluster.broker_identity import (
            WHO_AM_I_TIMEOUT_S,
            BrokerIdentity,
            own_principal,
        )

        identity = BrokerIdentity(self.settings.broker_principals)
        try:
            if identity.authenticated:
                return await own_principal(peers, address, identity)
            logger.warning("replication between the servers is not authenticated"
                           " (broker_principals is empty): the cluster trusts its network")
            if self.settings.tls_enabled:
                # The peers' TLS handshake can fail (a CA that did not sign their
                # certificates, a name they do not carry): found here, at the start, rather
                # than as ISRs that shrink to their leaders.
                await peers.who_am_i(address, WHO_AM_I_TIMEOUT_S)
            return ""
        except SecurityConfigError as exc:
            raise StartupError(str(exc)) from exc
        except grpc.aio.AioRpcError as exc:
            raise StartupError(
                f"this server cannot call itself at {address} as its peers will call it"
                f" (inter-broker TLS and credentials): {exc.code().name}: {exc.details()}"
            ) from exc

    async def _start_replication(self, peers: PeerChannels) -> None:
        """Make this server's replicas leaders and followers as etcd says
        (server/cluster/replica_roles.py), served by the serving layer, and let the
        Replication service serve the followers."""
        from stratalog.server.cluster.replica_roles import ReplicaRoles

        assert self.replica_manager is not None and self.cluster_node is not None
        assert self.log_manager is not None
        from stratalog.server.coordinator_placement import LeadershipListeners
        from stratalog.server.transaction_service import ClusterTransactions

        # The coordinator of a __consumer_offsets or __cluster_transaction_state partition is
        # its leader; the transactions also drop a partition's produce permissions.
        listeners = []
        if self.groups is not None and self.groups.cluster is not None:
            listeners.append(self.groups.cluster)
        if isinstance(self.coordinator, ClusterTransactions):
            self.coordinator.calls.peers = peers
            listeners.append(self.coordinator)
        roles = ReplicaRoles(
            self.cluster_node, self.log_manager, self.settings, self._executor,
            events=self.replica_manager, peers=peers, metrics=self.metrics,
            leadership=LeadershipListeners(*listeners),
        )
        # Before it applies the view: a replicated topic must never be served as a local one.
        self.replica_manager.join_cluster(self.cluster_node, roles)
        if self._replication is not None:
            self._replication.replica_roles = roles
        self.replica_roles = roles
        await roles.start()
        if self.metrics is not None:
            from stratalog.server.cluster.cluster_metrics import ClusterHealth

            ClusterHealth(self.cluster_node, self.log_manager.default_config).bind(self.metrics)
        # Once the view is applied (never on one not loaded): topics deleted while this
        # server was away, and topics no longer assigned here, leave its disk.
        from stratalog.server.cluster.stray_logs import StrayLogs

        self.stray_logs = StrayLogs(self.cluster_node, self.log_manager, self.replica_manager,
                                    self._executor)
        await self.stray_logs.start()

    # ---------------------------------------------------------------- security

    def _load_security(self) -> None:
        """Load the TLS files and the credential file (blocking). Raises SecurityConfigError."""
        settings = self.settings
        if settings.tls_enabled:
            self._tls = ServerTls(TlsFiles(
                settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file,
                settings.tls_client_auth,
            ))
        credentials = None
        if settings.authentication_credentials_file:
            credentials = CredentialFile.load(settings.authentication_credentials_file)
        self._authenticator = Authenticator(
            credentials,
            anonymous_allowed=settings.anonymous_allowed,
            executor=self._auth_executor,
            cache_entries_max=settings.authentication_cache_entries_max,
            threads=settings.authentication_threads,
            queue_max=settings.authentication_queue_max,
            failures_per_host_max=settings.authentication_failures_per_host_max,
            failure_window_ms=settings.authentication_failure_window_ms,
        )

    def _interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The server interceptors in call order (server/security/__init__.py's table), after
        the metrics one, which counts every call the others refuse too."""
        assert self._authenticator is not None
        interceptors: list[grpc.aio.ServerInterceptor] = [
            MetricsInterceptor(self.metrics.grpc_server),
            AuthenticationInterceptor(
                self._authenticator,
                client_certificates=self.settings.tls_client_auth == "required",
                reflection_open=self.settings.reflection_open,
                metrics=self.metrics,
            ),
        ]
        if self.authorizer is not None:
            interceptors.append(AuthorizationInterceptor(
                self.authorizer, reflection_open=self.settings.reflection_open,
                metrics=self.metrics,
            ))
        self._request_quotas = RequestQuotas(
            self.quotas,
            ProduceAdmission(self.quotas, self.settings.quota_produce_bytes_in_flight_max),
            self.settings.fetch_max_bytes_default, self.metrics,
        )
        interceptors.append(QuotaInterceptor(self._request_quotas, self.metrics))
        return interceptors

    async def reload(self) -> bool:
        """SIGHUP: :meth:`reload_security`, then :meth:`reload_quotas`; True if both did."""
        security = await self.reload_security()
        quotas = await self.reload_quotas()
        return security and quotas

    async def reload_security(self) -> bool:
        """SIGHUP: read the TLS files and the credential file again; whatever fails to load
        keeps its previous version, and the error is logged. True if everything reloaded."""
        loop = asyncio.get_running_loop()
        settings, ok = self.settings, True
        if self._tls is not None:
            try:
                await loop.run_in_executor(self._auth_executor, self._tls.reload)
                logger.info("reloaded the TLS certificate %s", settings.tls_cert_file)
            except SecurityConfigError as exc:
                ok = False
                logger.error("TLS reload failed, the previous certificate stays: %s", exc)
        if self.replica_roles is not None:
            try:
                await self.replica_roles.peers.reload(self._auth_executor)
                logger.info("reloaded the inter-broker TLS and credential files")
            except SecurityConfigError as exc:
                ok = False
                logger.error("inter-broker reload failed, the previous files stay: %s", exc)
        path = settings.authentication_credentials_file
        if path and self._authenticator is not None:
            try:
                credentials = await loop.run_in_executor(
                    self._auth_executor, CredentialFile.load, path
                )
            except SecurityConfigError as exc:
                ok = False
                logger.error("credential file reload failed, the previous one stays: %s", exc)
            else:
                self._authenticator.replace_credentials(credentials)
                logger.info("reloaded the credential file %s: %d users, %d tokens",
                            path, len(credentials.users), len(credentials.tokens))
        return ok

    async def reload_quotas(self) -> bool:
        """SIGHUP: read the settings again (file, environment, flags) and apply their quotas.
        A file that no longer reads keeps the quotas in force, and the error is logged. True
        if the quotas were reloaded."""
        loop = asyncio.get_running_loop()
        try:
            settings = await loop.run_in_executor(self._executor, reload_settings, self.settings)
        except (SettingsError, RuntimeError) as exc:  # RuntimeError: the pool is shut (stopping)
            logger.error("reloading the quotas failed, the previous ones stay: %s", exc)
            return False
        config = QuotaConfig.of_settings(settings)
        if config == self.quotas.config:
            logger.info("quotas reloaded: unchanged")
            return True
        self.quotas.update(config)
        logger.info("quotas reloaded: producer_byte_rate %d, consumer_byte_rate %d, "
                    "%d principals with their own", config.producer_byte_rate,
                    config.consumer_byte_rate, len(config.overrides))
        return True

    def serving_facts(self) -> ServingFacts:
        """What the banner says of this server once it serves (startup_banner.py)."""
        from stratalog import __version__

        assert self.log_manager is not None and self.port is not None
        log_manager, settings = self.log_manager, self.settings
        logs = log_manager.logs()
        metrics_url = None
        if self.metrics_port is not None:
            scheme = "https" if settings.tls_enabled else "http"
            metrics_url = (f"{scheme}://{settings.metrics_listen_host}:{self.metrics_port}"
                           "/metrics")
        return ServingFacts(
            version=__version__,
            host=settings.listen_address.host,
            port=self.port,
            metrics_url=metrics_url,
            log_dirs=[str(path) for path in log_manager.log_dirs],
            topics=len({topic for topic, _ in logs}),
            partitions=len(logs),
            clean_shutdown=all(log_manager.had_clean_shutdown.values()),
            recovered_segments=log_manager.recovered_segments,
            open_files_limit=log_manager.descriptor_budget.limit,
            partitions_max=log_manager.descriptor_budget.partitions_max,
            kafka=(f"{self.kafka.address.host}:{self.kafka.port}" if self.kafka is not None
                   else None),
        )

    def held_for_waiting_rpcs_bytes(self) -> int:
        """An estimate of the most memory held since the last call for Subscribe streams,
        long polls and Session streams: their idle cost each, the Subscribe messages in flight
        as gRPC holds them, Session answers and decompression. Peaks, not the values now: a
        crowd that came and went between two maintenance passes counts (one that lasted under
        a second was never seen, and never trimmed after). Event-loop only."""
        limits, budget, service = self._limits, self._subscribe_budget, self._service
        if limits is None or budget is None or service is None:
            return 0
        return (limits.take_peak_total() * WAITING_RPC_BYTES_ESTIMATE
                + budget.take_peak_bytes() * MESSAGE_COPIES_HELD
                + service.take_held_peak_bytes())

    async def _maybe_trim_heap(self) -> None:
        """Give freed memory back to the kernel once many waiting RPCs went away (their
        messages and call state, freed, would otherwise stay resident: allocator.py)."""
        if self._trim_watch.trim_due(self.held_for_waiting_rpcs_bytes()):
            loop = asyncio.get_running_loop()
            released = await loop.run_in_executor(self._executor, trim_heap)
            logger.debug("waiting RPCs went away: heap trimmed (released: %s)", released)

    def _refresh_log_metrics(self) -> None:
        assert self.log_manager is not None
        self.metrics.update_logs(self.log_manager.list_topics())

    async def _maintain(self) -> None:
        """Run a maintenance pass every ``maintenance_interval_ms`` until cancelled."""
        assert self.log_manager is not None and self.coordinator is not None
        interval_s = self.settings.maintenance_interval_ms / 1000
        log_manager, coordinator = self.log_manager, self.coordinator
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            try:
                # The LogManager is thread-safe and its pass runs beside appends; the pool
                # keeps the pass's file I/O off the loop.
                report = await loop.run_in_executor(self._executor, log_manager.run_maintenance)
                logger.debug("maintenance pass: %s", report)
                await loop.run_in_executor(self._executor, self._refresh_log_metrics)
                await self._maybe_trim_heap()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("maintenance pass failed; the next runs in %.1f s", interval_s)
            try:
                # Apart from the storage pass: one failing must not hold the other back.
                txn_report = await loop.run_in_executor(
                    self._executor, coordinator.run_maintenance
                )
                for error in txn_report.errors:
                    logger.warning("transaction maintenance: %s (retried next pass)", error)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("transaction maintenance pass failed; the next runs in %.1f s",
                                 interval_s)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop gracefully: answer in-flight RPCs, then close the logs cleanly.

        ``grace_s`` defaults to ``shutdown_grace_ms``. Raises what ``LogManager.close``
        raised (the shutdown was not clean then).
        """
        if grace_s is None:
            grace_s = self.settings.shutdown_grace_ms / 1000
        if self.cluster_node is not None:
            # Still serving: the leaderships move to other in-sync replicas first
            # (server/cluster/controlled_shutdown.py).
            await self.cluster_node.controlled_shutdown(
                self.settings.controlled_shutdown_timeout_ms / 1000)
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._service is not None:
            self._service.begin_shutdown()
        if self.groups is not None:
            self.groups.begin_shutdown()  # parked JoinGroups and SyncGroups: NOT_COORDINATOR
        if self.replica_roles is not None:
            self.replica_roles.begin_shutdown()
        if self._replication is not None:
            self._replication.begin_shutdown()  # followers' sessions: calls that never end
        if self.stray_logs is not None:
            self.stray_logs.close()
        if self.kafka is not None:
            await self.kafka.stop()
        if self._grpc is not None:
            await self._grpc.stop(grace_s)
        await self._close_everything()

    async def _close_everything(self) -> None:
        roles, self.replica_roles = self.replica_roles, None
        if roles is not None:
            await roles.close()  # fetchers stop before the lease goes and the logs close
        node, self.cluster_node = self.cluster_node, None
        if node is not None:
            await node.close()
        # First: revoking the lease deletes this server's keys at once, so another server
        # takes over the controller role without waiting for a session timeout.
        await self._close_etcd()
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            self._maintenance = None
        if self._grpc is not None:
            await self._grpc.stop(0)
        kafka, self.kafka = self.kafka, None
        if kafka is not None:
            await kafka.stop()
        groups, self.groups = self.groups, None
        if groups is not None:
            await groups.close()  # before the logs close: its writer appends to them
            self.metrics.bind_groups(None)
            self.metrics.bind_group_lag(None, None)
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            await endpoint.close()
        self.metrics.bind_cleaner(None)
        coordinator, self.coordinator = self.coordinator, None
        log_manager = self.log_manager
        loop = asyncio.get_running_loop()
        from stratalog.server.transaction_service import ClusterTransactions

        if isinstance(coordinator, ClusterTransactions):
            await coordinator.stop()  # cluster mode: the loads and the marker senders
        try:
            # The executor still runs a maintenance pass or an fsync that outlived its RPC:
            # close after them (the pool finishes queued work in order of submission). The
            # coordinator first: it writes markers into the LogManager's logs, never the
            # other way round.
            if coordinator is not None:
                await loop.run_in_executor(self._executor, coordinator.close)
            self.log_manager = None
            if log_manager is not None:
                await loop.run_in_executor(self._executor, log_manager.close)
        finally:
            self.log_manager = None
            self._executor.shutdown(wait=True)
            self._auth_executor.shutdown(wait=True)


def _context_source(tls: ServerTls) -> Callable[[], ssl.SSLContext]:
    return lambda: tls.ssl_context


@contextlib.contextmanager
def _grpc_log_kept_on_failure() -> Iterator[None]:
    """Hold back what is written to file descriptor 2 inside the block; write it out again
    unless the block raised. Not thread-safe with other writers to fd 2 (start-up only)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
            held.seek(0)  # only after success: an exception skips the replay
            written = held.read()
            if written:
                os.write(2, written)
    finally:
        os.close(saved)


def client_limit_options(settings: Settings) -> list[tuple[str, int]]:
    """gRPC core's part of the per-client limits (server/client_limits.py has the rest): how
    many connections there may be, and when an idle one closes.

    gRPC shows a Python server no connections, so these are the limits on them there are: the
    server's connections in all (Kafka's ``max.connections``; a connection beyond it is closed
    as it comes), not per host. HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS
    (``grpc.max_concurrent_streams``) is left unlimited on purpose: at its cap gRPC resets
    streams that race with ones just ended (REFUSED_STREAM, which reaches the client as
    UNAVAILABLE instead of waiting), and a client opens a second connection anyway; the waiting
    RPC limits are what holds a client back.
    """
    return [
        ("grpc.max_allowed_incoming_connections", settings.max_connections),
        ("grpc.max_connection_idle_ms", settings.connections_max_idle_ms),
    ]


def metrics_endpoint_limits(settings: Settings) -> MetricsEndpointLimits:
    """The metrics endpoint's limits from the server's settings (already range-checked)."""
    return MetricsEndpointLimits(
        connections_max=settings.metrics_connections_max,
        connections_max_idle_ms=settings.metrics_connections_max_idle_ms,
        request_timeout_ms=settings.metrics_request_timeout_ms,
        request_bytes_max=settings.metrics_request_bytes_max,
        authentication_required=settings.metrics_authentication == "required",
    )


def _install_signal_handlers(stop: asyncio.Event, server: Server) -> None:
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[bool]] = set()

    def on_hangup() -> None:
        logger.info("SIGHUP: reloading the TLS files, the credential file and the quotas")
        task = loop.create_task(server.reload(), name="stratalog-reload")
        reloads.add(task)  # a reference until done: the loop keeps only weak ones
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hangup)

    def on_signal(signum: int) -> None:
        if stop.is_set():
            logger.info("%s again: already stopping", signal.Signals(signum).name)
            return
        logger.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


async def main(settings: Settings, out: TextIO = sys.stdout) -> int:
    """Serve until SIGTERM/SIGINT; the process's exit code (0 after a clean shutdown)."""
    stop = asyncio.Event()
    server = Server(settings)
    # The handlers first: `stratalog reload` signals whoever the pid file names as soon as it
    # exists, and SIGHUP's default action would end the process.
    _install_signal_handlers(stop, server)
    try:
        # Before anything touches the disk or a port: a second server on the same pid file
        # is refused as the first thing it does.
        pid_file = PidFile.acquire(settings.pid_file) if settings.pid_file else None
    except PidFileError as exc:
        logger.error("%s", exc)
        return 1
    if pid_file is not None:
        logger.info("pid %d written to %s (stratalog reload finds the server there)",
                    os.getpid(), pid_file.path)
    try:
        return await _serve(server, settings, stop, out)
    finally:
        if pid_file is not None:
            pid_file.release()


async def _serve(server: Server, settings: Settings, stop: asyncio.Event, out: TextIO) -> int:
    """:func:`main` once the pid file is held: start, serve until ``stop``, stop."""
    try:
        await server.start()
    except StartupError as exc:
        logger.error("%s", exc)
        return 1
    # What start-up loaded (the partitions above all) lives as long as the process: no
    # collection need scan it again (garbage_collector.py).
    freeze_loaded_objects()
    # The banner before the stdout lines: whoever waits for those finds it in the log.
    for line in banner_lines(server.settings, server.serving_facts()):
        logger.info("%s", line)
    host = settings.listen_address.host
    print(f"stratalog: listening on {host}:{server.port}", file=out, flush=True)
    if server.metrics_port is not None:
        scheme = "https" if settings.tls_enabled else "http"
        print(f"stratalog: metrics on {scheme}://{settings.metrics_listen_host}:"
              f"{server.metrics_port}/metrics", file=out, flush=True)
    if server.kafka is not None:
        print(f"stratalog: kafka on {server.kafka.address.host}:{server.kafka.port}", file=out,
              flush=True)
    await stop.wait()
    try:
        await server.stop()
    except Exception:
        logger.exception("shutdown was not clean")
        return 1
    logger.info("stopped cleanly")
    return 0


def run(settings: Settings) -> int:
    """Configure logging, run :func:`main` on uvloop (asyncio's own loop where uvloop is absent)."""
    configure_logging(settings)
    # grpc.aio's poller thread takes the GIL for every completion; a handler coming back from a
    # blocking read then waits for the switch interval (5 ms by default) at worst. Measured in
    # docs/server.md: FetchByOffset's handler time fell by a third with 200 µs.
    sys.setswitchinterval(settings.gil_switch_interval_us / 1e6)
    tune_allocator(settings.malloc_mmap_threshold_bytes)
    limit_arenas(settings.malloc_arena_max)
    set_young_objects_max(settings.gc_young_objects_max)
    # Every value at DEBUG only: the start logs a banner instead (startup_banner.py), and
    # `stratalog serve --print-settings` prints them without starting (issue 25).
    for line in describe(settings):
        logger.debug("setting %s", line)
    try:
        import uvloop
    except ImportError:  # Windows: uvloop does not exist there
        loop_factory = None
    else:
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main(settings))
