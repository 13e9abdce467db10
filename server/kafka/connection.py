"""One Kafka client connection: frames in, requests served one at a time, answers out in order.

Kafka's broker reads a connection's next request only once it answered the one before (the
``SocketServer`` processor mutes the channel meanwhile): a client may pipeline requests (its
``max.in.flight.requests.per.connection``), and they are served in the order sent, which the
idempotent producer's sequence numbers rely on. This connection does the same with a short
queue: frames are read ahead while one request is served, up to
``kafka_queued_requests_per_connection_max`` of them, then the socket is not read until the
queue drains.

Bounds (nothing a client sends makes the server hold more):

* a frame's size is checked from its prefix (framing.py: ``kafka_request_bytes_max``, Kafka's
  ``socket.request.max.bytes``) and its bytes are reserved from the listener's
  :class:`~stratalog.server.byte_budget.ByteBudget` (``kafka_queued_request_bytes_max``, Kafka's
  ``queued.max.request.bytes``) before its body is buffered; while the budget is full the socket
  is not read. The reservation is released once the request is answered.
* answers: when the transport's write buffer is above its high-water mark (a client that does
  not read), the next request waits until it drains: one answer at a time is held.
* a connection idle for ``connections_max_idle_ms`` is closed (Kafka's
  ``connections.max.idle.ms``).
* before a required SASL exchange succeeded, and during any exchange, a frame larger than
  ``kafka_sasl_receive_bytes_max`` closes the connection (Kafka's
  ``sasl.server.max.receive.size``): a client that has not said who it is cannot reserve
  more of the budget than an exchange needs.

SASL (sasl_session.py): after a SaslHandshake of version 0 the next frames are raw SASL tokens,
handed to ``sasl_session.answer_raw_token`` instead of being decoded; a connection whose SASL
session ended (``kafka_connections_max_reauth_ms``), or that sends anything but SaslAuthenticate
amid an exchange, is closed at that request (``SaslSession.refusal``).

A plaintext Fetch answer may carry file regions (storage/file_region.py): its encoded bytes go
through the transport and each region's bytes from the segment file to the socket with
``sendfile``, once the transport has written what came before (zero copy: docs/kafka-protocol.md,
"Zero-copy fetch and the hot path"). A TLS connection never asks for regions.

A frame that is not Kafka's (a size out of bounds, a header that does not parse, an API key or
version not served, a body that does not decode) closes the connection, as Kafka does; a bad
ApiVersions version is answered (KIP-511). A handler's unexpected exception is logged and closes
the connection (the client reconnects and retries): a request is never half answered, but for
a zero-copy answer whose segment file was truncated during the send, which closes the connection
in the middle of the frame (as Kafka's broker does).

Serving without a task switch: a request that arrives while nothing is being served (the
connection idle, not throttled, its answers drained) is served at once from ``data_received``
by stepping its coroutine: when it finishes without suspending (an inline append, a read of the
page cache: most requests) its answer is written in the same loop iteration; when it suspends
(a long poll, an append in the thread pool, a lock held by another connection), the coroutine,
as it stands, is handed to the connection's task, which resumes it and serves what came after in
order. The two paths run the same ``_answer``: the same checks, bounds, metrics and bytes out.

Concurrency: event-loop only. One task per connection serves the requests that wait or
suspend; ``_busy`` says that task is serving (then ``data_received`` only queues), and every
request runs in the connection's one :class:`contextvars.Context` (``current_identity``).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import os
import time
import types
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol

from kafka.protocol.api_key import ApiKey

from stratalog.server.client_text import loggable
from stratalog.server.kafka import sasl_session
from stratalog.server.kafka.apis.registry import HANDLERS, SERVED_VERSIONS
from stratalog.server.kafka.codec import (
    RequestBodyError,
    RequestHeader,
    RequestHeaderError,
    UnknownApiError,
    decode_body,
    decode_header,
    encode_response,
)
from stratalog.server.kafka.context import ConnectionState, RequestContext
from stratalog.server.kafka.framing import FrameError, FrameReader
from stratalog.server.security.principal import current_identity
from stratalog.server.storage.file_region import RegionTruncatedError

if TYPE_CHECKING:
    from stratalog.server.byte_budget import ByteBudget
    from stratalog.server.kafka.context import KafkaServices

__all__ = ["ConnectionHost", "KafkaConnection"]

logger = logging.getLogger(__name__)

#: API keys served before a required SASL exchange succeeded.
_BEFORE_AUTHENTICATION = frozenset({ApiKey.ApiVersions, ApiKey.SaslHandshake,
                                    ApiKey.SaslAuthenticate})


def _set_ready(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, Any], yielded: Any,
             thrown: BaseException | None = None) -> Generator[Any, Any, Any]:
    """Await the rest of ``coro``, which was stepped outside the awaiting task's own steps and
    suspended on ``yielded`` (a future, or None for a bare yield): the task waits for
    ``yielded`` and then drives ``coro`` on exactly as if it had awaited ``coro`` from its
    start (results sent, exceptions such as a cancellation thrown in); ``coro``'s result
    back. ``thrown``: an exception for ``coro`` at once instead of waiting."""
    while True:
        try:
            if thrown is not None:
                exc, thrown = thrown, None
                raise exc
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation goes on to coro, as in a task
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value


class ConnectionHost(Protocol):
    """What a connection needs of its listener (listener.py's KafkaListener)."""

    services: KafkaServices
    budget: ByteBudget

    def admit(self, connection: KafkaConnection) -> bool: ...
    def forget(self, connection: KafkaConnection) -> None: ...
    def connection_state(self, connection_id: str, host: str,
                         transport: asyncio.BaseTransport) -> ConnectionState: ...
    def log_refusal(self, connection_id: str, problem: str) -> None: ...
    def observe(self, api_key: int, seconds: float) -> None: ...


class KafkaConnection(asyncio.Protocol):
    """One client connection (module docstring)."""

    def __init__(self, listener: ConnectionHost) -> None:
        self._listener = listener
        settings = listener.services.settings
        self._reader = FrameReader(settings.kafka_request_bytes_max)
        self._queue: collections.deque[tuple[bytes, int]] = collections.deque()
        self._queued_max = settings.kafka_queued_requests_per_connection_max
        self._unauthenticated_bytes_max = settings.kafka_sasl_receive_bytes_max
        self._transport: asyncio.Transport | None = None
        self._state: ConnectionState | None = None
        self._ready = asyncio.Event()  # the task has something to serve
        self._busy = False  # the task is serving (data_received only queues meanwhile)
        # A request stepped in data_received that suspended: (its coroutine, what it awaits,
        # its frame's reserved bytes), for the task to finish.
        self._handoff: tuple[Coroutine[Any, Any, int | None], Any, int] | None = None
        self._throttle_ms = 0  # a throttle earned by a request answered in data_received
        self._thrown: BaseException | None = None  # for the handed-over request, at once
        self._context = contextvars.copy_context()
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None
        self._reserved = 0  # bytes of the budget taken for the frame being read
        self._reserving: asyncio.Task[None] | None = None
        self._paused = False
        self._throttled = False  # muted by a quota: the socket is not read
        self._closed = False
        self._last_active = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, but have its methods.)
        self._transport = transport  # type: ignore[assignment]
        listener = self._listener
        if not listener.admit(self):
            transport.abort()
            self._closed = True
            return
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else "unknown"
        port = peer[1] if isinstance(peer, tuple) and len(peer) > 1 else 0
        self._state = listener.connection_state(f"{host}:{port}", host, transport)
        # Fetch answers send batches from the segment files on a plain TCP socket only: TLS
        # encrypts them in this process.
        self._state.zero_copy = (transport.get_extra_info("sslcontext") is None
                                 and transport.get_extra_info("ssl_object") is None
                                 and transport.get_extra_info("socket") is not None)
        self._task = asyncio.get_running_loop().create_task(
            self._serve(), name=f"stratalog-kafka-{host}:{port}", context=self._context)
        self._arm_idle_timer(listener.services.settings.connections_max_idle_ms / 1000)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_active = time.monotonic()
        self._reader.feed(data)
        self._take_frames()
        if self._queue and not self._busy:
            self._serve_now()

    def eof_received(self) -> bool | None:
        return None  # close the transport: a half-closed client gets no more answers

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        if self._reserving is not None:
            self._reserving.cancel()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        handoff, self._handoff = self._handoff, None
        if handoff is not None:
            # The task is cancelled before it took the request over: the request is
            # cancelled as it would have been in the task.
            coro, _, reserved = handoff
            self._listener.budget.release(reserved)
            try:
                coro.throw(asyncio.CancelledError())
            except (StopIteration, asyncio.CancelledError):
                pass
            except Exception:
                logger.exception("a Kafka request failed as its connection closed")
            else:
                coro.close()  # it awaited again: end it there
        self._release_all()
        self._listener.forget(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # ---------------------------------------------------------------- reading

    def _take_frames(self) -> None:
        """Move whole frames from the reader to the queue, reserving each one's bytes first;
        stop reading the socket when the queue is full or the budget is."""
        reader = self._reader
        budget = self._listener.budget
        while not self._closed:
            try:
                size = reader.next_size()
            except FrameError as exc:
                self._close(f"{exc}")
                return
            if size is None:
                break
            state = self._state
            if (state is not None and size > self._unauthenticated_bytes_max
                    and (not state.authenticated
                         or (state.sasl is not None and state.sasl.exchanging))):
                self._close(f"a request of {size} bytes before the SASL authentication this"
                            " listener requires, or during an exchange"
                            f" (kafka_sasl_receive_bytes_max {self._unauthenticated_bytes_max})")
                return
            if not self._reserved:
                taken = budget.try_reserve(size)
                if taken is None:
                    self._pause()
                    if self._reserving is None:
                        self._reserving = asyncio.get_running_loop().create_task(
                            self._reserve(size))
                    return
                self._reserved = taken
            frame = reader.next_frame()
            if frame is None:
                break
            self._queue.append((frame, self._reserved))
            self._reserved = 0
        if len(self._queue) >= self._queued_max:
            self._pause()
        else:
            self._resume()

    async def _reserve(self, size: int) -> None:
        """Wait for room in the budget for the next frame, then go on reading."""
        try:
            self._reserved = await self._listener.budget.reserve(size)
        finally:
            self._reserving = None
        if self._closed:
            self._release_all()
            return
        self._take_frames()
        self._wake()

    def _wake(self) -> None:
        """Have the task serve what is queued (when it is not serving already)."""
        if self._queue and not self._busy:
            self._ready.set()

    def _pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _resume(self) -> None:
        if (self._paused and self._transport is not None and self._reserving is None
                and not self._throttled):
            self._paused = False
            self._transport.resume_reading()

    def _release_all(self) -> None:
        budget = self._listener.budget
        while self._queue:
            budget.release(self._queue.popleft()[1])
        if self._reserved:
            budget.release(self._reserved)
            self._reserved = 0

    # ---------------------------------------------------------------- serving

    def _serve_now(self) -> None:
        """Serve the queued requests here, in data_received, while each finishes without
        suspending (the module docstring); hand the first that suspends, or a throttle, to
        the task. The caller checked that the task is not serving."""
        state = self._state
        assert state is not None
        services = self._listener.services
        budget = self._listener.budget
        queue = self._queue
        task = self._task
        context = self._context
        loop = task.get_loop()  # type: ignore[union-attr]
        if asyncio.current_task(loop) is not None:
            # Called from inside a task (never by the event loop's transports, but a caller
            # may): the step cannot run as this connection's task; the task serves.
            self._busy = True
            self._ready.set()
            return
        while queue and not self._closed:
            if self._throttled or not self._writable.is_set():
                self._busy = True  # the task waits for the throttle or the transport
                self._ready.set()
                return
            frame, reserved = queue.popleft()
            if self._paused:
                self._take_frames()  # room in the queue again: read on
            coro = self._answer(frame, state, services)
            del frame
            # The step runs as a step of the connection's task (its context, and the task as
            # asyncio.current_task(): asyncio.timeout and its kin need one), since the task is
            # where the rest of the coroutine runs if it suspends.
            _enter_task(loop, task)
            try:
                yielded = context.run(coro.send, None)
            except StopIteration as done:
                budget.release(reserved)
                throttle_ms = done.value
            except (Exception, asyncio.CancelledError):
                budget.release(reserved)
                # (_answer handles a handler's exceptions; this is a cancellation the handler
                # raised itself, or a bug in _answer: the task would have ended, the
                # connection left unserved. Closing it lets the client retry elsewhere.)
                logger.exception("a Kafka request failed outside its handler")
                self._close(None, reason="server_error")
                return
            else:
                self._busy = True
                self._handoff = (coro, yielded, reserved)
                self._ready.set()
                return
            finally:
                _leave_task(loop, task)
            self._last_active = time.monotonic()
            if throttle_ms is None:
                return  # closed
            if throttle_ms > 0:
                self._throttle_ms = throttle_ms
                self._throttled = True
                self._pause()
                self._busy = True
                self._ready.set()
                return

    async def _serve(self) -> None:
        """Serve in order, one at a time, until the connection ends: a request handed over by
        ``_serve_now``, a throttle it earned, then the queued requests."""
        state = self._state
        assert state is not None
        services = self._listener.services
        budget = self._listener.budget
        try:
            while True:
                if self._throttle_ms:
                    throttle_ms, self._throttle_ms = self._throttle_ms, 0
                    await self._mute(throttle_ms)
                    continue
                handoff = self._handoff
                if handoff is not None:
                    self._handoff = None
                    coro, yielded, reserved = handoff
                    thrown, self._thrown = self._thrown, None
                    try:
                        throttle_ms = await _resumed(coro, yielded, thrown)
                    finally:
                        budget.release(reserved)
                elif self._queue:
                    self._busy = True
                    frame, reserved = self._queue.popleft()
                    if self._paused:
                        self._take_frames()  # room in the queue again: read on
                    try:
                        if not self._writable.is_set():
                            await self._writable.wait()
                        throttle_ms = await self._answer(frame, state, services)
                    finally:
                        budget.release(reserved)
                        del frame
                else:
                    self._busy = False  # data_received serves the next request itself
                    self._ready.clear()
                    try:
                        await self._ready.wait()
                    except asyncio.CancelledError as exc:
                        if self._handoff is None or self._closed:
                            raise
                        # Meant for the request just handed over, which ran as this task
                        # (an asyncio.timeout that ran out before the task took it over).
                        self._thrown = exc
                    continue
                self._last_active = time.monotonic()
                if throttle_ms is None:
                    return
                if throttle_ms > 0:
                    await self._mute(throttle_ms)
        except asyncio.CancelledError:
            pass

    async def _mute(self, throttle_ms: int) -> None:
        """Kafka mutes a throttled client's channel for the throttle time: nothing is read
        nor served (the client's next requests wait in its socket)."""
        self._throttled = True
        self._pause()
        try:
            await asyncio.sleep(throttle_ms / 1000)
        finally:
            self._throttled = False
        self._take_frames()

    async def _answer(self, frame: bytes, state: ConnectionState, services: Any) -> int | None:
        """Serve one request and write its answer; its throttle time, or None when the
        connection was closed instead."""
        sasl = state.sasl
        if sasl is not None and sasl.raw_tokens:  # after a SaslHandshake v0 (sasl_session.py)
            return await self._answer_raw_token(frame, state, services)
        try:
            header = decode_header(frame, SERVED_VERSIONS)
        except UnknownApiError as exc:
            if exc.api_key == ApiKey.ApiVersions:
                from stratalog.server.kafka.apis.api_versions import unsupported_version_answer

                self._write(unsupported_version_answer(exc.correlation_id))
                return 0
            self._close(str(exc))
            return None
        except RequestHeaderError as exc:
            self._close(str(exc))
            return None
        authenticator = services.authenticator
        if (state.identity.credential is not None and authenticator is not None
                and not authenticator.still_valid(state.identity)):
            # A reload removed the user or changed its password (as server/rpc/
            # authentication.py's stale_credentials refuses a Session stream's next request).
            self._close(None, why="the credentials it authenticated with are no longer valid"
                        " (the credential file was reloaded)")
            return None
        if sasl is not None and (refused := sasl.refusal(header.api_key, time.monotonic())):
            self._close(None, why=refused[1], reason=refused[0])
            return None
        if not state.authenticated and header.api_key not in _BEFORE_AUTHENTICATION:
            self._close(f"{ApiKey(header.api_key).name} before the SASL authentication"
                        " this listener requires (send SaslHandshake and SaslAuthenticate"
                        " first)", reason="unauthenticated")
            return None
        try:
            request = decode_body(frame, header)
        except RequestBodyError as exc:
            self._close(str(exc))
            return None
        ctx = RequestContext(services, state, header.api_key, header.api_version,
                             header.client_id or "")
        current_identity.set(state.identity)
        api = HANDLERS[header.api_key]
        started = time.perf_counter()
        try:
            response = await api.handler(ctx, request)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("Kafka %s v%d from %s failed; closing the connection",
                             ApiKey(header.api_key).name, header.api_version,
                             loggable(state.connection_id))
            self._close(None, reason="server_error")
            return None
        if response is not None and not self._closed:
            try:
                pieces = self._encode(header, response)
            except Exception:
                # A handler built an answer its version cannot carry: the server's bug. The
                # client is told by the close (it retries), never left waiting.
                logger.exception("Kafka %s v%d answer to %s does not encode; closing the"
                                 " connection", ApiKey(header.api_key).name, header.api_version,
                                 loggable(state.connection_id))
                self._close(None, reason="server_error")
                return None
            if header.api_key == ApiKey.Fetch and any(
                    getattr(piece, "file_region", False) for piece in pieces):
                await self._write_with_regions(pieces)
            else:
                self._write(pieces)
        self._listener.observe(header.api_key, time.perf_counter() - started)
        if ctx.close_after_answer:
            self._close(None, why="its SASL request was refused (Kafka closes the connection)",
                        reason="unauthenticated")
            return None
        return ctx.throttle_ms

    async def _answer_raw_token(self, frame: bytes, state: ConnectionState,
                                services: Any) -> int | None:
        """A raw SASL token (sasl_session.py): its raw answer, or the connection closed."""
        answer = await sasl_session.answer_raw_token(services, state, frame)
        if answer is None:
            self._close(None, why="its SASL authentication failed", reason="unauthenticated")
            return None
        self._write(answer)
        return 0

    @staticmethod
    def _encode(header: RequestHeader, response: Any) -> list[Any]:
        if header.api_key == ApiKey.ApiVersions:
            return encode_response(header, response, flexible_header=False)
        return encode_response(header, response)

    def _write(self, buffers: list[Any]) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        transport.writelines(buffers)

    async def _write_with_regions(self, pieces: list[Any]) -> None:
        """Write a frame some of whose pieces are file regions (a plaintext Fetch answer:
        storage/file_region.py): the bytes through the transport, each region with
        ``sendfile`` from its file straight to the socket once the transport has written
        everything before it (Kafka's ``FileRecords.writeTo``). The regions are closed
        whatever happens. A region whose file was truncated meanwhile, or a socket error,
        closes the connection: the frame is half written (Kafka closes it too)."""
        transport = self._transport
        state = self._state
        try:
            if transport is None or self._closed:
                return
            if state is None or not state.zero_copy:  # (regions are asked for plaintext only)
                self._write([p.read() if getattr(p, "file_region", False) else p
                             for p in pieces])
                return
            # A descriptor of our own for the socket: the transport's may be closed under us.
            socket_fd = os.dup(transport.get_extra_info("socket").fileno())
            try:
                run: list[Any] = []
                for piece in pieces:
                    if not getattr(piece, "file_region", False):
                        run.append(piece)
                        continue
                    if run:
                        transport.writelines(run)
                        run = []
                    while transport.get_write_buffer_size():  # the bytes before go first
                        await self._socket_writable(socket_fd)
                        await asyncio.sleep(0)  # the transport writes what it holds
                        if self._closed:
                            return
                    await self._send_region(piece, socket_fd)
                    if self._closed:
                        return
                if run:
                    transport.writelines(run)
            finally:
                os.close(socket_fd)
        except RegionTruncatedError as exc:
            self._abort(f"{exc}: closing the connection (its answer is half written)")
        except OSError as exc:  # the peer went away (the usual case), or no descriptor left
            self._abort(f"a Fetch answer could not be sent: {exc}", logging.DEBUG)
        except Exception:  # a bug: the answer is half written, the connection must end
            logger.exception("a Fetch answer failed half written")
            self._abort("a Fetch answer failed half written")
        finally:
            for piece in pieces:
                if getattr(piece, "file_region", False):
                    piece.close()

    async def _send_region(self, region: Any, socket_fd: int) -> None:
        """Send all of ``region`` to the non-blocking ``socket_fd``, waiting for room."""
        offset = 0
        size = len(region)
        while True:
            offset += region.send(socket_fd, offset)
            self._last_active = time.monotonic()  # a reader that reads is not idle
            if offset >= size or self._closed:
                return
            await self._socket_writable(socket_fd)

    @staticmethod
    async def _socket_writable(socket_fd: int) -> None:
        """Wait until ``socket_fd`` (a duplicate of the transport's) has room to write."""
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_writer(socket_fd, _set_ready, ready)
        try:
            await ready
        finally:
            loop.remove_writer(socket_fd)

    def _abort(self, why: str, level: int = logging.INFO) -> None:
        """Close the connection at once, its answer half written (nothing more is sent)."""
        if self._closed:
            return
        logger.log(level, "closing Kafka connection %s: %s",
                   loggable(self._state.connection_id if self._state else "?"), why)
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    # ---------------------------------------------------------------- ending

    def _arm_idle_timer(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(delay_s, self._check_idle)

    def _check_idle(self) -> None:
        if self._closed:
            return
        idle_s = self._listener.services.settings.connections_max_idle_ms / 1000
        remaining = self._last_active + idle_s - time.monotonic()
        if remaining > 0 or self._queue:
            self._arm_idle_timer(max(remaining, idle_s / 10))
            return
        self._close(None, level=logging.DEBUG, why="idle for connections_max_idle_ms",
                    reason="idle")

    def _close(self, problem: str | None, level: int = logging.INFO, why: str = "",
               reason: str = "bad_request") -> None:
        """Close the connection; ``problem`` (the client's fault) is logged, rate-limited;
        ``reason`` is the label it is counted under (stratalog_kafka_connections_closed)."""
        if self._closed:
            return
        self._closed = True
        self._listener.services.metrics.kafka_connections_closed.labels(reason).inc()
        if problem is not None:
            self._listener.log_refusal(self._state.connection_id if self._state else "?",
                                       problem)
        elif why:
            logger.log(level, "closing Kafka connection %s: %s",
                       loggable(self._state.connection_id if self._state else "?"), why)
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        """Close from the server's side (shutdown)."""
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            self._transport.close()
