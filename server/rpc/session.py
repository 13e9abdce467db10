"""Sessions: many Produce, fetch and ListOffsets requests on one long-lived stream, by id.

Intuition: a unary call costs ~0.5 ms of gRPC's asyncio Python on both sides (a new HTTP/2
stream, its headers and trailers, a task), more than a point read or a one-record append costs
the storage engine. Kafka's protocol pipelines requests on one connection and matches answers by
correlation id; the ``Session`` RPC does the same on one bidirectional gRPC stream: the client
writes ``SessionRequest`` messages (an id and one unary request), the server answers each with a
``SessionResponse`` carrying the same id, as soon as it is done, so answers may come in another
order than their requests (docs/api.md, "Sessions").

What a request on a session gets is exactly what its unary call gets, because it runs the same
code under the same rules, called directly with the stream's identity (:class:`SessionRequests`):
the credential re-check and the authorizer of server/security/, the quotas
(:class:`~stratalog.server.rpc.quotas.RequestQuotas`), and the servicer's behaviour of that RPC
(the request checks, one call to the serving layer, the metrics of that RPC). A refusal or
failure, which would have ended a unary call with a status, is that status as a
``SessionError`` (:func:`stratalog.server.rpc.status.session_error`); the stream goes on. Who the
caller is was decided once, when the stream was authenticated (as Kafka authenticates a
connection): every request of the stream runs as that identity.

One stream (:class:`SessionStream`)::

    reader task    reads a request when fewer than session_requests_in_flight_max are in
                   flight (else it waits: gRPC's flow control then holds the client back)
                   and runs it: the RPC's behaviour -> its answer serialized into a
                   SessionResponse -> written (one write at a time); then reads the next.
                   A request that must wait goes on in a task of its own from where it
                   stopped, and the reader reads on (from Python 3.12 on, every request
                   gets a task from the start: SERVE_IN_READER)
    request task   [a Produce: waits until the servicer is done with the previous Produce of
                   the same partition on this stream] -> the rest of the RPC's behaviour ->
                   its answer -> written -> its slot freed
    handler task   waits until the client half-closed and every request was answered (the
                   stream ends OK), or the server stops (below); cancelled when the client
                   cancels the stream, and then cancels the rest

Order: requests are served concurrently, so a long poll does not hold up a point read behind it;
but two Produce requests of one partition are appended in the order they came, as on a Kafka
connection: the idempotent producer's five batches in flight per partition arrive in order and
are never refused OUT_OF_ORDER_SEQUENCE for being overtaken.

Limits: at most ``session_requests_in_flight_max`` requests per stream are being served or
answered, an answer counting until gRPC's flow control took it. Bytes are bounded too, since one
request can hold megabytes (a fetch of 2 MiB: 1,024 of them on one stream held 2 GiB). Each
request is charged, from when it is read until its answer was taken by gRPC, what it may hold:
its own bytes for a Produce, its ``max_bytes`` (capped as the fetch caps it) for a fetch, and
:data:`ANSWER_BYTES_ESTIMATE` for the answer's other fields; once its answer is serialized, the
answer's real size instead. Two budgets::

    session_buffer_bytes         one stream: the reader reads the next request only while the
                                 stream holds less (else it waits: HTTP/2's flow control then
                                 holds the client back); so a stream holds at most this plus
                                 one request's charge
    session_buffer_bytes_total   all streams together (a :class:`ByteBudget`): a request whose
                                 charge does not fit is not served but answered
                                 RESOURCE_EXHAUSTED (RESOURCE_LIMIT_EXCEEDED, ``limit`` naming
                                 the setting; retriable), so that a crowd of streams whose
                                 clients stop reading cannot stop every other client's sessions

A long poll holds no answer while it waits for data: it gives its charge back (keeping
:data:`ANSWER_BYTES_ESTIMATE`) when it starts to wait, and takes it again when it wakes, before
it reads, waiting for room in both budgets if need be (:meth:`SessionStream.pause`,
:meth:`SessionStream.resume`, called around the serving layer's long-poll waits). So a Consumer's
long polls on many partitions (8 MiB each) do not stop its session's other requests, and a
crowd of long polls that wake together cannot pass the budgets either.

While a stream waits for gRPC to take an answer, gRPC holds a copy of it too: the memory held
for answers is at most twice ``session_buffer_bytes_total``, plus what answers larger than
their charge add (a fetch's first batch is sent whole even past its ``max_bytes``). A stream that ends (its client cancelled it, or went away) gives back
everything it was charged, served or not. A session is a waiting RPC of its connection and client
(:class:`~stratalog.server.client_limits.ClientLimits`, kind SESSION), admitted before anything
is read; a long poll on it is admitted as a unary one is (the same code path).

Malformed input: a request that is no SessionRequest, one that sets no request kind this server
knows, or one whose id is already pending is answered with a SessionError (INVALID_ARGUMENT,
INVALID_REQUEST) naming the problem, with the id it carried (0 when none could be read); the
stream goes on.

Shutdown: :meth:`Sessions.begin_shutdown` makes each stream answer the requests it reads from
then on with SHUTTING_DOWN (retriable), let those in flight finish (long polls answer at once:
the servicer wakes them), then end with SHUTTING_DOWN.

Format of an answer (written by :func:`session_response`, not by protobuf, so that the unary
response is serialized once and not copied into a SessionResponse first)::

    08 <varint id>                          field 1 (id), omitted when 0 as protobuf does
    <field << 3 | 2> <varint length> <body> field 2 produce, 3 fetch, 4 list_offsets, 5 error

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import grpc
import grpc.aio

from stratalog.records.varint import unsigned_varint_bytes
from stratalog.server.byte_budget import ByteBudget
from stratalog.server.client_limits import (
    ClientLimitExceededError,
    ClientLimits,
    Origin,
    WaitingRpcKind,
    call_origin,
)
from stratalog.server.metrics import GRPC_CODE_NAMES
from stratalog.server.rpc import status
from stratalog.server.rpc.authentication import stale_credentials
from stratalog.server.rpc.authorization import call_identity
from stratalog.server.rpc.decoding import SessionRequestView, UndecodableRequest
from stratalog.server.rpc.quotas import RequestQuotas, backlog_client, principal_name
from stratalog.server.rpc.requests import checked_request, failure_status
from stratalog.server.security.authorizer import decide_request, rule_for
from stratalog.server.security.errors import NotAuthorizedError, QuotaBacklogExceededError
from stratalog.server.storage.errors import InvalidTopicError, LogClosedError
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.authentication import Authenticator
    from stratalog.server.security.authorizer import Authorizer

__all__ = [
    "ANSWER_BYTES_ESTIMATE",
    "SESSION_RPCS",
    "Charge",
    "RequestFailed",
    "SessionBudgets",
    "SessionRequests",
    "SessionStream",
    "Sessions",
    "session_response",
]

logger = logging.getLogger(__name__)

_SERVICE = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name

#: The unary RPCs a session carries, and the SessionResponse field of each one's answer.
SESSION_RPCS: dict[str, int] = {
    "Produce": 2,
    "FetchByOffset": 3,
    "FetchByTimestamp": 3,
    "ListOffsets": 4,
}
_ERROR_FIELD = 5
_ID_TAG = b"\x08"  # field 1, varint
_SHUTTING_DOWN = "the server is shutting down; open a new session (or retry) later"
#: What an answer holds beyond the batches a fetch asked for (its other fields, the aborted
#: transactions of a READ_COMMITTED fetch, a SessionError's message) or a request beyond its
#: batches: the charge of a request that asks for no batches.
ANSWER_BYTES_ESTIMATE = 4 * 1024
_FETCH_RPCS = frozenset({"FetchByOffset", "FetchByTimestamp"})
#: The requests the quotas apply to.
_QUOTA_RPCS = frozenset({"Produce", *_FETCH_RPCS})
_OK = GRPC_CODE_NAMES[grpc.StatusCode.OK]
_CANCELLED = GRPC_CODE_NAMES[grpc.StatusCode.CANCELLED]
_UNKNOWN = GRPC_CODE_NAMES[grpc.StatusCode.UNKNOWN]

Behaviour = Callable[[Any, Any], Awaitable[Any]]

#: Run each request in the reader's own step first (:class:`_Resumed`). Sound while nothing on
#: a request's path asks ``asyncio.current_task()``, which is the reader there: so on Python
#: 3.11, where ``asyncio.wait_for`` (a long poll's wait) does not; 3.12's ``wait_for`` is built
#: on ``asyncio.timeout``, which does, and there every request gets a task of its own from the
#: start (the same code, minus the first step; tests run both ways).
SERVE_IN_READER = sys.version_info < (3, 12)


# Tags of the length-delimited answer fields, made once.
_FIELD_TAGS = {
    field: unsigned_varint_bytes(field << 3 | 2) for field in (2, 3, 4, _ERROR_FIELD)
}


def session_response(request_id: int, field: int, body: bytes) -> bytes:
    """A serialized SessionResponse: ``request_id``, and ``body`` (a serialized answer) as
    field ``field``; equal to protobuf's serialization of the same message."""
    head = (_ID_TAG + unsigned_varint_bytes(request_id)) if request_id else b""
    return b"".join((head, _FIELD_TAGS[field], unsigned_varint_bytes(len(body)), body))


def _error_response(request_id: int, grpc_status: grpc.Status) -> bytes:
    error = status.session_error(grpc_status)
    return session_response(request_id, _ERROR_FIELD, error.SerializeToString())


class RequestFailed(Exception):
    """A session request's answer is ``status``: what its unary call would have ended with."""

    def __init__(self, answer: grpc.Status) -> None:
        super().__init__(answer.details)
        self.status = answer


class Charge:
    """What one request is charged in its stream's and the total budget now (``size_bytes``:
    0 when it did not fit, and was refused), and what it gave back while it waits for data
    (``paused_bytes``). Event-loop only."""

    __slots__ = ("paused_bytes", "size_bytes")

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.paused_bytes = 0


class SessionRequests:
    """What serves each Session request: the rules its unary call is served under, asked
    directly with the stream's identity, and the servicer's behaviour of its RPC::

        re-check the stream's credentials (with a credential file: a reload may have removed
            its user or token, or replaced its password)   UNAUTHENTICATED
        count it as a unary call of its RPC (grpc_server_*, as the metrics interceptor does)
        authorize it: its RPC's rule for the stream's identity (with an authorizer)
                                                            PERMISSION_DENIED
        the quotas: a Produce waits while its principal is over its quota; a fetch is capped
            and its answer held back (while any quota is set)
        the servicer's behaviour (request checks, one call to the serving layer)

    in the order the server's interceptors apply them to a unary call (server/app.py), so
    that a refusal is the same status, counted in the same metrics. Event-loop only.
    """

    def __init__(self, servicer: Any, metrics: ServerMetrics, *,
                 credentials: Authenticator | None = None,
                 authorizer: Authorizer | None = None,
                 quotas: RequestQuotas | None = None) -> None:
        self._servicer = servicer
        self._metrics = metrics
        self._collector = metrics.grpc_server
        self._credentials = credentials
        self._authorizer = authorizer
        self._quotas = quotas
        self._labels = {rpc: ("unary", _SERVICE, rpc) for rpc in SESSION_RPCS}
        self._rules = {rpc: rule_for(f"/{_SERVICE}/{rpc}") for rpc in SESSION_RPCS}

    async def answer(self, rpc: str, request: Any, stream: SessionStream, charge: Charge,
                     served: asyncio.Future[None] | None) -> Any:
        """The response to ``request`` of ``rpc`` on ``stream``. ``served`` (None: nothing)
        is resolved once the servicer is done with the request, before a quota's delay of
        its answer: what the next Produce of the partition waits for.

        Raises:
            RequestFailed: the status its unary call would have ended with.
        """
        identity = stream.identity
        credentials = self._credentials
        if credentials is not None and not credentials.still_valid(identity):
            self._metrics.observe_authentication_failure("wrong_credentials")
            raise RequestFailed(status.to_status(stale_credentials()))
        labels = self._labels[rpc]
        collector = self._collector
        collector.observe_started(labels)
        started = time.perf_counter()
        code = _UNKNOWN
        try:
            response = await self._authorized(rpc, request, stream, charge, served)
            code = _OK
            return response
        except RequestFailed as exc:
            code = GRPC_CODE_NAMES.get(exc.status.code, _UNKNOWN)
            raise
        except asyncio.CancelledError:
            code = _CANCELLED
            raise
        finally:
            collector.observe_handled(labels, code, time.perf_counter() - started)

    async def _authorized(self, rpc: str, request: Any, stream: SessionStream, charge: Charge,
                          served: asyncio.Future[None] | None) -> Any:
        authorizer = self._authorizer
        rule = self._rules[rpc]
        if authorizer is not None and type(request) is not UndecodableRequest:
            try:
                decider = decide_request(authorizer, stream.identity, rule, request)
            except NotAuthorizedError as exc:
                self._metrics.observe_authorization_denial(exc.operation)
                raise RequestFailed(status.to_status(exc)) from exc
            except InvalidTopicError as exc:  # a name refused before any decision on it
                raise RequestFailed(status.to_status(exc)) from exc
        else:
            decider = None
        quotas = self._quotas
        serve = functools.partial(self._serve, rpc, request, stream, charge, served)
        if quotas is None or not quotas.manager.enabled or rpc not in _QUOTA_RPCS:
            response = await serve()
        else:
            principal = principal_name(stream.identity)
            try:
                if rpc == "Produce":
                    response = await quotas.produce(
                        principal, backlog_client(principal, stream.identity, stream.peer),
                        request, serve)
                else:
                    response = await quotas.fetch(principal, request, serve)
            except QuotaBacklogExceededError as exc:
                raise RequestFailed(status.to_status(exc)) from exc
        if decider is not None and rule.answer is not None:
            rule.answer(decider, response)
        return response

    async def _serve(self, rpc: str, request: Any, stream: SessionStream, charge: Charge,
                     served: asyncio.Future[None] | None) -> Any:
        """The servicer's behaviour of ``rpc``, with the request metrics of that RPC."""
        servicer = self._servicer
        started = time.perf_counter()
        code = "OK"
        try:
            request = checked_request(request)
            if rpc == "Produce":
                appended = None if served is None else functools.partial(_resolve, served)
                return await servicer.produce(request, appended)
            if rpc == "FetchByOffset":
                return await servicer.fetch_by_offset(
                    request, stream.origin, functools.partial(stream.pause, charge),
                    functools.partial(stream.resume, charge))
            if rpc == "FetchByTimestamp":
                return await servicer.fetch_by_timestamp(request)
            return await servicer.list_offsets(request)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except Exception as exc:
            answer, code = failure_status(exc)
            raise RequestFailed(answer) from exc
        finally:
            self._metrics.observe_request(rpc, code, time.perf_counter() - started)
            if served is not None:
                _resolve(served)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SessionBudgets(NamedTuple):
    """The byte limits of Session streams (module docstring, "Limits") and what a fetch may
    return, to charge it: the settings of the same names."""

    stream_bytes_max: int  # session_buffer_bytes
    total: ByteBudget  # session_buffer_bytes_total
    fetch_max_bytes_default: int
    fetch_max_bytes_max: int

    def charge_bytes(self, rpc: str | None, request: Any) -> int:
        """What a request of ``rpc`` may hold until its answer is taken (module docstring)."""
        if type(request) is UndecodableRequest or rpc is None:
            return ANSWER_BYTES_ESTIMATE
        if rpc == "Produce":
            return int(request.request_bytes) + ANSWER_BYTES_ESTIMATE
        if rpc in _FETCH_RPCS:
            asked = request.max_bytes if request.max_bytes > 0 else self.fetch_max_bytes_default
            return min(asked, self.fetch_max_bytes_max) + ANSWER_BYTES_ESTIMATE
        return ANSWER_BYTES_ESTIMATE


class Sessions:
    """The server's Session streams: what serves their requests, the limits, the metrics, the streams
    open now (for shutdown) and their requests in flight (a gauge). Event-loop only."""

    def __init__(
        self,
        requests: SessionRequests,
        limits: ClientLimits,
        metrics: ServerMetrics,
        in_flight_max: int,
        budgets: SessionBudgets,
    ) -> None:
        assert in_flight_max >= 1 and budgets.stream_bytes_max >= 1
        self.requests = requests
        self.in_flight_max = in_flight_max
        self.budgets = budgets
        self._limits = limits
        self._metrics = metrics
        self._streams: set[SessionStream] = set()
        self.stopping = False
        self.in_flight = 0  # requests of every stream, for the gauge
        metrics.session_requests.set_function(lambda: self.in_flight)

    @property
    def streams(self) -> int:
        """How many streams are open."""
        return len(self._streams)

    async def serve(self, context: grpc.aio.ServicerContext) -> None:
        """Serve one Session stream until the client half-closes it (and every request was
        answered), cancels it, or the server stops (LogClosedError: SHUTTING_DOWN).

        Raises:
            ClientLimitExceededError: the connection, client or server holds its limit of
                waiting RPCs; nothing was read.
            LogClosedError: the server is stopping.
        """
        if self.stopping:
            raise LogClosedError(_SHUTTING_DOWN)
        with self._limits.admit(call_origin(context), WaitingRpcKind.SESSION):
            # Admitted: the headers tell the client so; it writes nothing before them.
            await context.send_initial_metadata(())
            stream = SessionStream(self, context)
            self._streams.add(stream)
            self._metrics.sessions.inc()
            try:
                await stream.run()
            finally:
                self._streams.discard(stream)
                self._metrics.sessions.dec()

    def begin_shutdown(self) -> None:
        """Make every stream finish what it holds and end with SHUTTING_DOWN."""
        self.stopping = True
        for stream in list(self._streams):
            stream.stop()


class _Resumed:
    """Awaiting this finishes ``coroutine``, which already ran up to yielding ``yielded``: a
    request started in the reader's own step (most answer without ever waiting) is handed to
    a task only when it must wait, and the task goes on where the request stopped, passing
    what the task sends or throws (a wake-up, a cancellation) on to it."""

    __slots__ = ("_coroutine", "_yielded")

    def __init__(self, coroutine: Any, yielded: Any) -> None:
        self._coroutine = coroutine
        self._yielded = yielded

    def __await__(self) -> Any:
        coroutine, value = self._coroutine, self._yielded
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:
                try:
                    value = coroutine.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coroutine.send(sent)
                except StopIteration as stop:
                    return stop.value


class SessionStream:
    """One Session stream: the ids of its requests not yet answered, its requests in flight
    (the reader's own, and a task for each that had to wait), the tail of each partition's
    Produce requests, the write lock, and the reader's wait for a slot.

    A request runs in the reader's step first: one that needs no wait (a point read from the
    page cache, an uncontended append) is answered and written before the next is read, as a
    unary call would be, without a task; one that waits (a long poll, a read or append in the
    thread pool, a Produce behind another of its partition) goes on in a task of its own, and
    the reader reads on.

    Invariants (:meth:`check`): at most ``in_flight_max`` requests in flight; every task holds
    one of them, and every pending id is a task's; a partition's entry in ``_produce_tails`` is
    the future of its last Produce started, resolved once the servicer is done with it;
    ``held_bytes`` is what the stream's requests in flight are charged in the total budget
    (given back whole when the stream ends).

    Concurrency: event-loop only; the reader, the request tasks and the handler's task share
    it.
    """

    def __init__(self, sessions: Sessions, context: grpc.aio.ServicerContext) -> None:
        self._sessions = sessions
        self._context = context
        self._peer = context.peer() or "unknown"
        #: Who every request of the stream runs as: decided when the stream was authenticated.
        self.identity = call_identity(context)
        self.peer = context.peer()
        origin = call_origin(context)
        #: Whose waiting RPCs the stream's long polls count in.
        self.origin: Callable[[], Origin] = lambda: origin
        self._loop = asyncio.get_running_loop()
        self._in_flight_max = sessions.in_flight_max
        self._budgets = sessions.budgets
        self._in_flight = 0
        self.held_bytes = 0
        self._pending: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._produce_tails: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._write_lock = asyncio.Lock()
        # The reader waits for a free slot or for room in the stream's budget, and so do the
        # long polls that woke (shared: awaited through a shield).
        self._room: asyncio.Future[None] | None = None
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._reading = True
        self._stopping = False

    @property
    def in_flight(self) -> int:
        """Requests being served or answered."""
        return self._in_flight

    def check(self) -> None:
        """Assert the invariants (for tests)."""
        assert len(self._pending) <= len(self._tasks) <= self._in_flight <= self._in_flight_max
        assert self.held_bytes >= 0 and (self._in_flight or not self.held_bytes)
        assert self.held_bytes <= self._budgets.total.in_use_bytes

    async def run(self) -> None:
        """Read, serve and answer until the stream is over (see :meth:`Sessions.serve`)."""
        reader = self._loop.create_task(self._read())
        try:
            await self._finished
        finally:
            reader.cancel()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await reader
            # Every request's charge back, including those of tasks cancelled before they
            # ever ran (their own release never runs).
            with contextlib.suppress(BaseException):
                await asyncio.gather(*tasks, return_exceptions=True)
            held, self.held_bytes = self.held_bytes, 0
            self._budgets.total.release(held)
        if self._stopping:
            raise LogClosedError(_SHUTTING_DOWN)

    def stop(self) -> None:
        """Answer what comes from now on with SHUTTING_DOWN, end once nothing is in flight."""
        self._stopping = True
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        done = not self._in_flight and (self._stopping or not self._reading)
        if done and not self._finished.done():
            self._finished.set_result(None)

    async def _read(self) -> None:
        read = self._context.read
        budgets = self._budgets
        try:
            while True:
                if (self._in_flight >= self._in_flight_max
                        or self.held_bytes >= budgets.stream_bytes_max):
                    await self._wait_for_room()
                    continue
                request = await read()
                if request is grpc.aio.EOF:
                    return  # half-closed: the stream ends once every request is answered
                charge = self._charge(request)
                answer = self._start(request, charge)
                if answer is not None:  # answered in this step: written before reading on
                    try:
                        self._hold(charge, len(answer))
                        await self._write(answer)
                    finally:
                        self._release(charge)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The client went away (or the call ended) mid-read or mid-write: nobody is left
            # to answer.
            logger.debug("session from %s ended: %r", self._peer, exc)
            if not self._finished.done():
                self._finished.set_result(None)
        finally:
            self._reading = False
            self._maybe_finish()

    async def _wait_for_room(self) -> None:
        """Until a request of this stream is done or gives back some of its charge."""
        room = self._room
        if room is None or room.done():
            room = self._room = self._loop.create_future()
        await asyncio.shield(room)

    def _make_room(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)

    def _charge(self, view: SessionRequestView) -> Charge:
        """Charge ``view`` what it may hold, in the total budget (nothing when it does not
        fit: :meth:`_start` refuses it then)."""
        total = self._budgets.total
        taken = total.try_reserve(self._budgets.charge_bytes(view.rpc, view.request))
        if taken is None:
            return Charge(0)
        self.held_bytes += taken
        return Charge(taken)

    def _hold(self, charge: Charge, size_bytes: int) -> None:
        """The request's answer is ``size_bytes`` long: charge that instead."""
        self._budgets.total.adjust(charge.size_bytes, size_bytes)
        self.held_bytes += size_bytes - charge.size_bytes
        charge.size_bytes = size_bytes

    def pause(self, charge: Charge) -> None:
        """``charge``'s request waits for data: keep :data:`ANSWER_BYTES_ESTIMATE` of it."""
        given_back = charge.size_bytes - ANSWER_BYTES_ESTIMATE
        if given_back <= 0:
            return
        charge.size_bytes -= given_back
        charge.paused_bytes += given_back
        self.held_bytes -= given_back
        self._budgets.total.release(given_back)
        self._make_room()

    async def resume(self, charge: Charge) -> None:
        """``charge``'s request woke: take back what :meth:`pause` gave, once the stream holds
        room for it (or holds nothing else) and the total has it (first come, first served).
        A cancellation while it waits takes nothing."""
        wanted = charge.paused_bytes
        if not wanted:
            return
        while (self.held_bytes > charge.size_bytes
               and self.held_bytes + wanted > self._budgets.stream_bytes_max):
            await self._wait_for_room()
        taken = await self._budgets.total.reserve(wanted)
        charge.paused_bytes = 0
        charge.size_bytes += taken
        self.held_bytes += taken

    def _start(self, view: SessionRequestView, charge: Charge) -> bytes | None:
        """Serve ``view`` (a slot is free, ``charge`` taken: nothing if it did not fit) in
        this step as far as it goes: its answer, or None when it went on in a task."""
        request_id, rpc, request = view.id, view.rpc, view.request
        self._in_flight += 1
        self._sessions.in_flight += 1
        if not charge.size_bytes:
            total = self._budgets.total
            return _error_response(request_id, status.to_status(ClientLimitExceededError(
                f"Session request refused: the answers Session streams hold, all together, "
                f"are at the server's limit ({total.in_use_bytes} of {total.total_bytes} bytes"
                f" held, session_buffer_bytes_total); retry once clients have read them",
                limit=total.name,
            )))
        if request_id in self._pending:
            # The pending request keeps its id; this one is answered and forgotten.
            return _error_response(request_id, status.invalid_request(
                f"request id {request_id} is already in use by a request not yet answered;"
                " ids must be unique among a session's pending requests",
                metadata={"field": "id"},
            ))
        if self._stopping:
            return _error_response(request_id, status.to_status(LogClosedError(_SHUTTING_DOWN)))
        if rpc is None:
            return _error_response(request_id, _malformed(request))
        tail: tuple[tuple[str, int], asyncio.Future[None]] | None = None
        previous = None
        if rpc == "Produce" and type(request) is not UndecodableRequest:
            # Appended after the previous Produce of the partition on this stream, as sent.
            key = (request.topic, request.partition)
            previous = self._produce_tails.get(key)
            tail = (key, self._loop.create_future())
            self._produce_tails[key] = tail[1]
        if previous is None:
            coroutine = self._call(request_id, rpc, request, charge, tail)
            if not SERVE_IN_READER:
                work: Awaitable[bytes] = coroutine
            else:
                try:
                    yielded = coroutine.send(None)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                work = _Resumed(coroutine, yielded)
        else:
            work = self._after(previous, request_id, rpc, request, charge, tail)
        self._pending.add(request_id)
        task = self._loop.create_task(self._finish(request_id, work, charge))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return None

    async def _after(
        self,
        previous: asyncio.Future[None],
        request_id: int,
        rpc: str,
        request: Any,
        charge: Charge,
        tail: tuple[tuple[str, int], asyncio.Future[None]] | None,
    ) -> bytes:
        try:
            await previous
        except BaseException:
            self._serve_tail(tail)
            raise
        return await self._call(request_id, rpc, request, charge, tail)

    async def _finish(self, request_id: int, work: Awaitable[bytes], charge: Charge) -> None:
        """A request that had to wait: its answer, written; then its slot and its charge are
        free."""
        try:
            answer = await work
            self._pending.discard(request_id)  # answered: the client may use the id again
            self._hold(charge, len(answer))
            await self._write(answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A write to a stream that is going away; the stream ends by its reader.
            logger.debug("session request %d from %s not answered: %r", request_id,
                         self._peer, exc)
        finally:
            self._pending.discard(request_id)
            self._release(charge)

    def _release(self, charge: Charge) -> None:
        self._in_flight -= 1
        self._sessions.in_flight -= 1
        size_bytes, charge.size_bytes = charge.size_bytes, 0
        self.held_bytes -= size_bytes
        self._budgets.total.release(size_bytes)
        self._make_room()
        self._maybe_finish()

    def _serve_tail(self, tail: tuple[tuple[str, int], asyncio.Future[None]] | None) -> None:
        """The Produce's turn is over: the next one of its partition may go."""
        if tail is None:
            return
        key, mine = tail
        if not mine.done():
            mine.set_result(None)
        if self._produce_tails.get(key) is mine:
            del self._produce_tails[key]

    async def _call(
        self,
        request_id: int,
        rpc: str,
        request: Any,
        charge: Charge,
        tail: tuple[tuple[str, int], asyncio.Future[None]] | None = None,
    ) -> bytes:
        """The serialized answer of one request: its RPC's response, or its SessionError. A
        Produce's ``tail`` is served once the servicer is done with it (before a quota's delay
        of its answer), and in any case when this returns."""
        try:
            response = await self._sessions.requests.answer(
                rpc, request, self, charge, None if tail is None else tail[1])
        except RequestFailed as exc:
            return _error_response(request_id, exc.status)
        except Exception as exc:
            # Every refusal and failure is a RequestFailed; this is a bug, answered as gRPC
            # would answer it (INTERNAL, logged).
            return _error_response(request_id, status.to_status(exc))
        finally:
            self._serve_tail(tail)
        return session_response(request_id, SESSION_RPCS[rpc], response.SerializeToString())

    async def _write(self, answer: bytes) -> None:
        # One write at a time (gRPC allows one message in flight per call); it returns when
        # gRPC's flow control took the message.
        async with self._write_lock:
            await self._context.write(answer)


def _malformed(request: Any) -> grpc.Status:
    """The status of a SessionRequest that names no request this server serves."""
    if type(request) is UndecodableRequest:
        return status.invalid_request(
            f"request: not a valid {request.message_type}: {request.error}",
            metadata={"field": "request"},
        )
    kinds = ", ".join(
        field.name for field in broker_pb2.SessionRequest.DESCRIPTOR.oneofs_by_name[
            "request"].fields
    )
    return status.invalid_request(
        f"request: sets no request kind this server serves (one of {kinds}); a newer"
        " client's kind, or none at all",
        metadata={"field": "request"},
    )
