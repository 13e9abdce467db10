"""A Client's Session stream: requests written with an id, answers routed back by it.

Intuition: a unary gRPC call costs ~0.5 ms of asyncio Python on the two sides; a message on an
open stream a fraction of that. A :class:`ClientSession` keeps one ``Session`` stream open
(docs/api.md, "Sessions") and carries the Client's Produce, FetchByOffset, FetchByTimestamp and
ListOffsets requests on it, each a ``SessionRequest`` with an id of its own; the server answers
each as soon as it is done, so a long poll does not hold up a point read sent after it.

    caller       serializes the request, gives it an id and a future, queues it, waits
    writer task  waits for the server's headers (it sends them once it admitted the stream),
                 then writes the queued requests in order, one at a time (gRPC allows one
                 write in flight per call, and a write that is cancelled cancels the whole
                 call: no caller's cancellation may reach it)
    reader task  reads answers and resolves the future of each id

Requests are written in the order they were made, and the server appends a stream's Produce
requests of one partition in the order they came (server/rpc/session.py): the Producer's batches in
flight of a partition are appended in the order sent (as separate unary calls they could
overtake one another on the way to the partition's lock, and the later be refused
OUT_OF_ORDER_SEQUENCE).

Failures, as a unary call would see them:

* an answer that is a ``SessionError`` raises the same exception as the unary call
  (:func:`~stratalog.client.errors.from_session_error`);
* a request with a deadline that passes raises :class:`~.errors.RequestTimeoutError`
  (DEADLINE_EXCEEDED, retriable); its late answer is dropped;
* a caller that is cancelled forgets its request: the answer is dropped when it comes (there is
  no cancel message in broker.proto; the server finishes the request, a long poll within its
  ``max_wait_ms``);
* when the stream breaks (the server restarted or stopped, the connection dropped) every
  request in flight fails with the stream's error (BrokerUnavailableError, ShuttingDownError:
  retriable), and the session is closed; the Client opens a new one for the next request. (A
  stream that ends while a request is being written reaches grpc.aio as INTERNAL "Internal
  error from Core", the write's error replacing the status: that is a broken stream too, and
  answered as BrokerUnavailableError);
* a request larger than the server accepts (``max_request_bytes``) ends the whole stream in
  gRPC: that request fails with :class:`~.errors.MessageTooLargeError` as its unary call would,
  the others on the stream with BrokerUnavailableError (retriable), and the Client sends
  requests over the limit (gRPC's error says it) as unary calls from then on, which fail alone;
* a stream refused before the server read anything (a server without the Session RPC:
  UNIMPLEMENTED; the client's waiting RPC limit: RESOURCE_LIMIT_EXCEEDED) fails its requests
  with :class:`SessionRefusedError`, which the Client answers by sending them as unary calls.

Format: requests and answers are written and read as bytes, without a SessionRequest or
SessionResponse object: the unary request is serialized once, and an answer's inner message is
parsed from a view of the bytes gRPC received::

    08 <varint id> <field << 3 | 2> <varint length> <serialized unary message>

Concurrency: event-loop only; one ClientSession per Client, shared by all its callers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from stratalog.records.varint import unsigned_varint_bytes
from stratalog.v1 import broker_pb2

from .errors import (
    BrokerUnavailableError,
    MessageTooLargeError,
    RequestTimeoutError,
    StratalogError,
    from_rpc_error,
    from_session_error,
)

__all__ = ["SESSION_METHOD", "ClientSession", "SessionRefusedError"]

logger = logging.getLogger(__name__)

#: The Session RPC's method path.
SESSION_METHOD = "/stratalog.v1.Broker/Session"

_ERROR_FIELD = broker_pb2.SessionResponse.DESCRIPTOR.fields_by_name["error"].number
_WIRE_VARINT, _WIRE_LEN = 0, 2
_ID_TAG = b"\x08"


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it. Raises IndexError if cut."""
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def session_request(request_id: int, field: int, body: bytes) -> bytes:
    """A serialized SessionRequest: ``request_id`` and ``body`` (a serialized unary request)
    as its oneof member numbered ``field``; what protobuf would serialize."""
    return b"".join((_ID_TAG, unsigned_varint_bytes(request_id),
                     unsigned_varint_bytes(field << 3 | _WIRE_LEN),
                     unsigned_varint_bytes(len(body)), body))


def parse_session_response(data: bytes) -> tuple[int, int, memoryview]:
    """``data`` (a serialized SessionResponse) as (id, the answer's field number, a view of
    its bytes). The server's shape (the id, then one answer) is read by a scan; anything else
    is read by protobuf, whose last value of a field wins.

    Raises:
        google.protobuf.message.DecodeError: ``data`` is no SessionResponse.
    """
    try:
        request_id, position = 0, 0
        if data[:1] == _ID_TAG:
            request_id, position = _read_varint(data, 1)
        key, position = _read_varint(data, position)
        length, position = _read_varint(data, position)
        if key & 7 == _WIRE_LEN and position + length == len(data):
            return request_id, key >> 3, memoryview(data)[position:]
    except IndexError:
        pass
    message = broker_pb2.SessionResponse.FromString(data)
    member = message.WhichOneof("response")
    if member is None:
        return message.id, 0, memoryview(b"")
    field = message.DESCRIPTOR.fields_by_name[member].number
    return message.id, field, memoryview(getattr(message, member).SerializeToString())


class SessionRefusedError(Exception):
    """The server refused the stream before reading any request: the requests on it may be sent
    as unary calls. ``permanent``: the server has no Session RPC (UNIMPLEMENTED), so sessions
    are off for good for this Client; otherwise (a limit of waiting RPCs) it may accept one
    later. ``error`` is the stream's error."""

    def __init__(self, error: StratalogError, *, permanent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.permanent = permanent


# Errors of the whole stream that mean "nothing was read": the server refused the stream.
_WAITING_RPC_LIMITS = frozenset({
    "waiting_rpcs_per_connection_max", "waiting_rpcs_per_client_max", "waiting_rpcs_max",
})


# What grpc.aio makes the status of a call that ended while a message was being written to it
# (the write's C-core error replaces the status the server sent): the stream broke, whatever
# the server said, so it is as retriable as the connection lost that it usually is.
_WRITE_RACE_DETAILS = "Internal error from Core"


def _write_race(err: grpc.aio.AioRpcError) -> bool:
    return err.code() == grpc.StatusCode.INTERNAL and (err.details() or "").startswith(
        _WRITE_RACE_DETAILS
    )


# gRPC's words for a message over a side's limit: "SERVER: Received message larger than max
# (100048 vs. 65536)" (the request's size, the limit).
_TOO_LARGE = re.compile(r"larger than max \((\d+) vs\. (\d+)\)")


def _refusal(error: StratalogError) -> SessionRefusedError | None:
    if error.code == grpc.StatusCode.UNIMPLEMENTED:
        return SessionRefusedError(error, permanent=True)
    if error.reason == "RESOURCE_LIMIT_EXCEEDED" and error.metadata.get(
        "limit"
    ) in _WAITING_RPC_LIMITS:
        return SessionRefusedError(error, permanent=False)
    return None


class ClientSession:
    """One Session stream of a Client: the call, the next id, the pending requests (id ->
    future), the queue of requests to write, and the writer and reader tasks.

    Invariants: every pending future is unresolved and is resolved exactly once (an answer, the
    deadline, the stream's end); once :attr:`closed`, nothing is pending and nothing is
    written. Ids are never reused (a uint64 counter), so a late answer never reaches a newer
    request.

    Concurrency: event-loop only.
    """

    def __init__(
        self, channel: grpc.aio.Channel, metadata: Sequence[tuple[str, str]] | None
    ) -> None:
        method = channel.stream_stream(SESSION_METHOD)  # bytes in, bytes out
        self._loop = asyncio.get_running_loop()
        self._call: Any = method(metadata=metadata)
        self._pending: dict[int, asyncio.Future[tuple[int, memoryview]]] = {}
        self._sizes: dict[int, int] = {}  # each pending request's message size
        self._next_id = 1
        #: The server's largest request, once a request over it broke a stream (else None):
        #: larger ones go as unary calls, which fail alone.
        self.request_bytes_max: int | None = None
        self._outbox: collections.deque[bytes] = collections.deque()
        self._wake: asyncio.Future[None] | None = None
        self._answered = False  # the server answered something: it read from the stream
        self.closed = False
        self._writer = self._loop.create_task(self._write_loop(), name="stratalog-session-writer")
        self._reader = self._loop.create_task(self._read_loop(), name="stratalog-session-reader")

    @property
    def pending(self) -> int:
        """Requests written or queued and not yet answered."""
        return len(self._pending)

    async def request(
        self, field: int, body: bytes, timeout_s: float | None
    ) -> tuple[int, memoryview]:
        """Send ``body`` (a serialized unary request) as the SessionRequest member numbered
        ``field``; its answer as (its SessionResponse field, a view of its bytes).

        Raises:
            StratalogError: the request's SessionError, as the unary call would raise it; the
                stream's error if it broke first; RequestTimeoutError after ``timeout_s``.
            SessionRefusedError: the server refused the stream; nothing was read.
        """
        if self.closed:
            raise StratalogError("the session is closed", code=grpc.StatusCode.UNAVAILABLE,
                                 retriable=True)
        request_id = self._next_id
        self._next_id = request_id + 1
        future: asyncio.Future[tuple[int, memoryview]] = self._loop.create_future()
        self._pending[request_id] = future
        message = session_request(request_id, field, body)
        self._sizes[request_id] = len(message)
        self._outbox.append(message)
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set_result(None)
        timer = None if timeout_s is None else self._loop.call_later(
            timeout_s, self._expire, request_id, timeout_s
        )
        try:
            answer_field, answer = await future
        except asyncio.CancelledError:
            self._pending.pop(request_id, None)  # its answer is dropped when it comes
            raise
        finally:
            self._sizes.pop(request_id, None)
            if timer is not None:
                timer.cancel()
        if answer_field == _ERROR_FIELD:
            raise from_session_error(broker_pb2.SessionError.FromString(answer))
        return answer_field, answer

    def _expire(self, request_id: int, timeout_s: float) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(RequestTimeoutError(
                f"no answer on the session within {timeout_s} s (Deadline Exceeded)",
                code=grpc.StatusCode.DEADLINE_EXCEEDED,
            ))

    async def _write_loop(self) -> None:
        call = self._call
        outbox, write = self._outbox, call.write
        try:
            # The server sends its headers once it admitted the stream; one that refuses it
            # (no Session RPC, a limit) ends it instead, and a write racing that end would
            # replace its status with gRPC's INTERNAL: so nothing is written before them.
            await call.initial_metadata()
            while True:
                while outbox:
                    if call.done():
                        return  # the reader learns why
                    await write(outbox.popleft())
                self._wake = self._loop.create_future()
                await self._wake
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The call ended: the reader learns why (its read raises) and fails the requests.
            logger.debug("session write failed: %r", exc)

    async def _read_loop(self) -> None:
        read, pending = self._call.read, self._pending
        try:
            while True:
                data = await read()
                if data is grpc.aio.EOF:
                    self._fail(StratalogError(
                        "the server ended the session", code=grpc.StatusCode.UNAVAILABLE,
                        retriable=True,
                    ))
                    return
                self._answered = True
                request_id, field, answer = parse_session_response(data)
                future = pending.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result((field, answer))
        except asyncio.CancelledError:
            self._fail(StratalogError("the client was closed", code=grpc.StatusCode.CANCELLED,
                                      retriable=True))
            raise
        except grpc.aio.AioRpcError as err:
            error = from_rpc_error(err)
            if _write_race(err):
                error = BrokerUnavailableError(
                    f"the session broke (the server ended it or the connection was lost) while a"
                    f" request was being written: {err.details()}",
                    code=grpc.StatusCode.UNAVAILABLE,
                )
            refusal = None if self._answered else _refusal(error)
            if refusal is not None:
                self._fail(refusal)
            elif isinstance(error, MessageTooLargeError):
                self._fail_too_large(error)
            else:
                self._fail(error)
        except Exception as exc:  # an answer that does not parse: the stream is not ours
            self._fail(StratalogError(f"the session's answers do not parse: {exc}",
                                      code=grpc.StatusCode.INTERNAL))
        finally:
            self.closed = True

    def _fail_too_large(self, error: MessageTooLargeError) -> None:
        """A message over a side's limit ended the stream: gRPC fails the whole call. Only the
        request of that size gets the error (as its unary call would); the others were
        innocent, and fail retriably, as on any broken stream."""
        match = _TOO_LARGE.search(error.message)
        size = int(match.group(1)) if match else None
        if match and error.message.startswith("SERVER"):
            self.request_bytes_max = int(match.group(2))
        broken = BrokerUnavailableError(
            f"the session broke: another request on it was too large ({error.message})",
            code=grpc.StatusCode.UNAVAILABLE,
        )
        sizes = self._sizes
        self._fail(broken, {id_: error for id_, future in self._pending.items()
                            if sizes.get(id_) == size})

    def _fail(self, error: BaseException,
              errors: dict[int, BaseException] | None = None) -> None:
        """Close: every pending request fails with ``error`` (or its own in ``errors``);
        nothing more is written."""
        self.closed = True
        pending = list(self._pending.items())
        self._pending.clear()
        for request_id, future in pending:
            if not future.done():
                future.set_exception((errors or {}).get(request_id, error))
        self._outbox.clear()
        self._writer.cancel()
        self._call.cancel()

    async def close(self) -> None:
        """Cancel the stream; requests in flight fail (CANCELLED, retriable)."""
        self._reader.cancel()
        self._writer.cancel()
        self._call.cancel()
        for task in (self._reader, self._writer):
            with contextlib.suppress(asyncio.CancelledError):
                await task
