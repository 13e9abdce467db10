"""The running server: LogManager, grpc.aio on uvloop, health, reflection, metrics, maintenance.

Life of a server process (``stratalog serve``)::

    open the LogManager (locks the log dirs, recovers after an unclean shutdown)
    open the TransactionCoordinator: replay __transaction_state, complete the commits and
        aborts a crash left half-written (their markers go to the LogManager's partitions)
    with authorizer = "acl": read the ACL file (server/security/acl_store.py)
    build grpc.aio server: the interceptors (authorization, then quotas), Broker +
        grpc.health.v1 (SERVING) + reflection; bind; start
    print "stratalog: listening on HOST:PORT" (the bound port when asked for port 0)
    start the Prometheus endpoint and the maintenance task
    ... serve until SIGTERM or SIGINT; SIGHUP reads the settings again and applies the
        quotas (server/security/quotas.py) ...
    health NOT_SERVING; long polls answer, Subscribe streams end (SHUTTING_DOWN)
    grpc stop(grace): no new RPCs; in-flight ones get shutdown_grace_ms, then are cancelled
    stop the maintenance task (a pass under way finishes)
    TransactionCoordinator.close(), then LogManager.close(): flush, checkpoints,
        clean-shutdown markers, unlock                                        -> exit 0

The maintenance task calls ``LogManager.run_maintenance`` (flush.ms flushes, retention,
checkpoints, delayed deletions; each pass bounded) in the thread pool every
``maintenance_interval_ms``, then refreshes the log-size metrics, then
``TransactionCoordinator.run_maintenance`` (aborts transactions open past their timeout,
forgets expired transactional ids, retries markers that failed; each job at its own interval).
A failing pass is logged and the next one runs on schedule.

The coordinator writes transaction markers from pool threads, through :meth:`Server.write_marker`:
the partition log appends the control batch and fsyncs it (the coordinator logs the transaction
complete next, and one server has no replica to keep the marker if the machine loses power),
and the servicer's readers of the partition are woken on the event loop, since a marker moves
the last stable offset that READ_COMMITTED long polls and Subscribe streams wait for.

The two lines printed on stdout are an interface: tests and scripts read the bound ports from
them (``listening on`` and ``metrics on``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TextIO

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from stratalog.server.allocator import tune_allocator
from stratalog.server.decoding import add_broker_service
from stratalog.server.metrics import MetricsEndpoint, ServerMetrics
from stratalog.server.security.acl_store import AclStore
from stratalog.server.security.authorizer import AuthorizationInterceptor, Authorizer
from stratalog.server.security.errors import SecurityConfigError
from stratalog.server.security.quotas import QuotaConfig, QuotaInterceptor, QuotaManager
from stratalog.server.service import BrokerService
from stratalog.server.settings import Settings, SettingsError, configure_logging, describe
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.storage.log_manager import LogManager
    from stratalog.server.transactions import TransactionConfig, TransactionCoordinator

__all__ = ["SERVICE_NAME", "Server", "StartupError", "main", "run"]

logger = logging.getLogger(__name__)

#: The Broker service's full name, as health checks and reflection know it.
SERVICE_NAME = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name


class StartupError(Exception):
    """The server could not start: a log dir is locked or broken, the transaction state log
    does not load, or the address is taken."""


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
        self.metrics = ServerMetrics()
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.log_manager: LogManager | None = None
        self.coordinator: TransactionCoordinator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(
            max_workers=settings.io_threads, thread_name_prefix="stratalog-io"
        )
        self._grpc: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._service: BrokerService | None = None
        self._endpoint = MetricsEndpoint(self.metrics)
        self._maintenance: asyncio.Task[None] | None = None
        # Authorization and quotas (server/security/): from start() until the process ends.
        self.authorizer: Authorizer | None = None
        self.quotas = QuotaManager(QuotaConfig.of_settings(settings))

    async def start(self) -> None:
        """Open the logs, bind and start serving.

        Raises:
            StartupError: the LogManager would not open, the transaction coordinator would not
                load its state log, or an address would not bind; what was opened is closed
                again.
        """
        from stratalog.server.storage.log_manager import LogManager
        from stratalog.server.transactions import TransactionCoordinator

        settings = self.settings
        loop = self._loop = asyncio.get_running_loop()
        try:
            self.log_manager = await loop.run_in_executor(
                self._executor,
                lambda: LogManager.open(settings.log_dirs, defaults=settings.log_defaults),
            )
        except Exception as exc:
            self._executor.shutdown(wait=False)
            raise StartupError(f"cannot open the log directories {list(settings.log_dirs)}: "
                               f"{exc}") from exc
        try:
            try:
                self.coordinator = await loop.run_in_executor(
                    self._executor,
                    lambda: TransactionCoordinator.open(
                        settings.log_dirs, self.write_marker,
                        config=transaction_config(settings),
                    ),
                )
            except Exception as exc:
                raise StartupError(
                    "cannot load the transaction coordinator's state log (__transaction_state)"
                    f" in {list(settings.log_dirs)}: {exc}"
                ) from exc
            if settings.authorizer == "acl":
                try:
                    # After the LogManager: the ACL file lives in a log dir it has locked.
                    store = await loop.run_in_executor(
                        self._executor, AclStore.open, settings.log_dirs
                    )
                except SecurityConfigError as exc:
                    raise StartupError(str(exc)) from exc
                self.authorizer = Authorizer(
                    store,
                    super_users=settings.super_users,
                    allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
                    cache_entries_max=settings.authorizer_cache_entries_max,
                    bindings_max=settings.acl_bindings_max,
                    request_entries_max=settings.acl_request_entries_max,
                    executor=self._executor,
                )
            await self._start_serving()
        except BaseException:
            await self._close_everything()
            raise

    async def _start_serving(self) -> None:
        assert self.log_manager is not None
        settings = self.settings
        address = settings.listen_address
        self._grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_request_bytes),
                ("grpc.max_send_message_length", settings.max_response_bytes),
                # Without this, a second server could bind the same port and steal half the
                # connections; a port in use must fail the start.
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
            interceptors=self._interceptors(),
        )
        assert self.coordinator is not None
        self._service = BrokerService(
            self.log_manager, settings, self.metrics, self._executor, coordinator=self.coordinator,
            authorizer=self.authorizer,
        )
        add_broker_service(self._service, self._grpc)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._grpc
        )
        try:
            self.port = self._grpc.add_insecure_port(str(address))
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {address}: {exc}") from exc
        await self._grpc.start()
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if settings.metrics_port >= 0:
            try:
                self.metrics_port = self._endpoint.start(address.host, settings.metrics_port)
            except OSError as exc:
                raise StartupError(
                    f"cannot serve metrics on {address.host}:{settings.metrics_port}: {exc}"
                ) from exc
        self._refresh_log_metrics()
        self._maintenance = asyncio.create_task(self._maintain(), name="stratalog-maintenance")

    def _interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The server interceptors in call order (server/security/__init__.py's table)."""
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self.authorizer is not None:
            interceptors.append(AuthorizationInterceptor(self.authorizer))
        interceptors.append(QuotaInterceptor(self.quotas, self.settings.fetch_max_bytes_default))
        return interceptors

    async def reload_quotas(self) -> bool:
        """SIGHUP: read the settings again (file, environment, flags) and apply their quotas.
        A file that no longer reads keeps the quotas in force, and the error is logged. True
        if the quotas were reloaded."""
        loop = asyncio.get_running_loop()
        try:
            settings = await loop.run_in_executor(self._executor, self.settings.reloaded)
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

    def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> None:
        """The coordinator's ``write_markers``: append a COMMIT or ABORT marker to a partition,
        fsync it, and wake the partition's readers on the event loop. Called from pool threads.

        Raises:
            UnknownTopicOrPartitionError: the partition is gone (the coordinator skips it).
            LogClosedError: the server is stopping (the coordinator retries at the next load).
            what the append or the flush raises (the coordinator retries).
        """
        from stratalog.server.storage.errors import LogClosedError

        log_manager = self.log_manager
        if log_manager is None:
            raise LogClosedError("the server is stopping: its logs are closed")
        partition_log = log_manager.get_log(topic, partition)
        partition_log.write_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        partition_log.flush()
        loop, service = self._loop, self._service
        if loop is None or service is None:
            return  # while loading: nobody reads yet
        # A closed loop (the process is exiting) has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(service.wake_readers, topic, partition)

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
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._service is not None:
            self._service.begin_shutdown()
        if self._grpc is not None:
            await self._grpc.stop(grace_s)
        await self._close_everything()

    async def _close_everything(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            self._maintenance = None
        if self._grpc is not None:
            await self._grpc.stop(0)
        self._endpoint.close()
        coordinator, self.coordinator = self.coordinator, None
        log_manager = self.log_manager
        loop = asyncio.get_running_loop()
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


def transaction_config(settings: Settings) -> TransactionConfig:
    """The coordinator's config from the server's settings (already range-checked)."""
    from stratalog.server.transactions import TransactionConfig

    return TransactionConfig(
        transaction_max_timeout_ms=settings.transaction_max_timeout_ms,
        transactional_id_expiration_ms=settings.transactional_id_expiration_ms,
        abort_timed_out_interval_ms=(
            settings.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        remove_expired_interval_ms=(
            settings.transaction_remove_expired_transaction_cleanup_interval_ms),
        transaction_partitions_max=settings.transaction_partitions_max,
    )


def _install_signal_handlers(stop: asyncio.Event, server: Server) -> None:
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[bool]] = set()

    def on_hangup() -> None:
        logger.info("SIGHUP: reloading the quotas")
        task = loop.create_task(server.reload_quotas(), name="stratalog-reload-quotas")
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
    _install_signal_handlers(stop, server)
    try:
        await server.start()
    except StartupError as exc:
        logger.error("%s", exc)
        return 1
    host = settings.listen_address.host
    print(f"stratalog: listening on {host}:{server.port}", file=out, flush=True)
    if server.metrics_port is not None:
        print(f"stratalog: metrics on http://{host}:{server.metrics_port}/metrics",
              file=out, flush=True)
    logger.info("serving %s on %s:%s", SERVICE_NAME, host, server.port)
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
    for line in describe(settings):
        logger.info("setting %s", line)
    try:
        import uvloop
    except ImportError:  # Windows: uvloop does not exist there
        loop_factory = None
    else:
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main(settings))
