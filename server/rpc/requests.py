"""What every Broker RPC handler shares: the request checks, the decorator that turns errors into
statuses and counts the call, and the state the handlers of each family read (:class:`RpcBase`).

A request-shape error (:class:`~stratalog.server.rpc.translation.BadRequestError`) names the
field a bad value came in; every other exception becomes its status in
:mod:`stratalog.server.rpc.status`, the one place that decides them.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from stratalog.server.broker import ReplicaManager
from stratalog.server.client_limits import ClientLimits
from stratalog.server.rpc import status
from stratalog.server.rpc.decoding import UndecodableRequest
from stratalog.server.rpc.subscribe_messages import SharedMessages
from stratalog.server.rpc.translation import PRODUCER_EPOCH_MAX, BadRequestError
from stratalog.server.storage.errors import InvalidTopicError
from stratalog.server.storage.partition_log import IsolationLevel
from stratalog.server.subscribe_budget import SubscribeBudget
from stratalog.server.topic_name_memo import ValidTopicNames
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.append_placement import AppendPlacement
    from stratalog.server.broker import AdminManager
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.authorizer import Authorizer
    from stratalog.server.settings import Settings
    from stratalog.server.storage.log_manager import LogManager
    from stratalog.server.transactions import TransactionCoordinator

__all__ = [
    "ACKS",
    "FETCH_FORMATS",
    "ISOLATION_LEVELS",
    "MAX_TIMESTAMP",
    "NO_MATCH",
    "RECORD_BATCHES",
    "RpcBase",
    "checked_request",
    "enum_value",
    "failure_status",
    "isolation_level_of",
    "non_negative",
    "partition_number",
    "producer_of",
    "rpc_method",
    "transactional_id_of",
]


_T = TypeVar("_T")

# The lowest special ListOffsets target of broker.proto (-1 latest, -2 earliest, -3 max
# timestamp); -1 also stands for "no match" in responses.
MAX_TIMESTAMP = -3
NO_MATCH = -1

FETCH_FORMATS = frozenset(broker_pb2.FetchFormat.values())
RECORD_BATCHES = broker_pb2.FETCH_FORMAT_RECORD_BATCHES
ISOLATION_LEVELS = frozenset(broker_pb2.IsolationLevel.values())
# Kafka's acks: none, the leader, all the in-sync replicas.
ACKS = (0, 1, -1)


def partition_number(value: int) -> int:
    if value < 0:
        raise BadRequestError("partition", f"must be >= 0, got {value}")
    return value


def non_negative(field: str, value: int) -> int:
    if value < 0:
        raise BadRequestError(field, f"must be >= 0, got {value}")
    return value


def enum_value(field: str, value: int, allowed: frozenset[int]) -> int:
    if value not in allowed:
        raise BadRequestError(field, f"unknown value {value}; one of {sorted(allowed)}")
    return value


def isolation_level_of(value: int) -> IsolationLevel:
    # broker.proto's IsolationLevel values are Kafka's, as the engine's are.
    return IsolationLevel(enum_value("isolation_level", value, ISOLATION_LEVELS))


def transactional_id_of(value: str) -> str:
    if not value:
        raise BadRequestError("transactional_id", "must not be empty")
    return value


def producer_of(producer_id: int, producer_epoch: int) -> tuple[int, int]:
    """The producer id and epoch of a transaction request, range-checked."""
    if producer_id < 0:
        raise BadRequestError("producer_id", f"must be >= 0, got {producer_id}")
    if not 0 <= producer_epoch <= PRODUCER_EPOCH_MAX:
        raise BadRequestError(
            "producer_epoch", f"must be in 0..{PRODUCER_EPOCH_MAX}, got {producer_epoch}"
        )
    return producer_id, producer_epoch


# ------------------------------------------------------------------------ the decorator


def rpc_method(stream: bool = False) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
    """Wrap an RPC method: errors to statuses, and the request metrics.

    Request bytes that were not a message (:class:`UndecodableRequest`) and request-shape errors
    (:class:`BadRequestError`) become INVALID_ARGUMENT with their field;
    every other exception goes through :func:`status.abort_with_error` (engine errors to their
    reasons, anything unexpected to INTERNAL, logged), unless the client cancelled the call
    (then the exception is what its end caused: counted CANCELLED, not logged). Unary RPCs observe their latency;
    streams count only their outcome.
    """

    def decorate(method: Callable[..., Awaitable[Any]]) -> Any:
        name = method.__name__

        @functools.wraps(method)
        async def wrapper(
            self: RpcBase, request: Any, context: grpc.aio.ServicerContext
        ) -> Any:
            started = time.perf_counter()
            code = "OK"
            try:
                return await method(self, checked_request(request), context)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                code = _code_name(context)
                raise
            except Exception as exc:
                if status.call_ended(context, exc):
                    # As a cancellation: gRPC then sends nothing more (a status now fails and
                    # is logged by gRPC itself) and logs only at debug level.
                    code = "CANCELLED"
                    raise asyncio.CancelledError from exc
                answer, code = failure_status(exc)
                await context.abort_with_status(answer)
            finally:
                elapsed = None if stream else time.perf_counter() - started
                self._metrics.observe_request(name, code, elapsed)

        return wrapper

    return decorate


def checked_request(request: Any) -> Any:
    """``request``, if it is a message: request bytes that were not one
    (:class:`UndecodableRequest`) are a BadRequestError naming the field ``request``."""
    if type(request) is UndecodableRequest:
        raise BadRequestError("request", f"not a valid {request.message_type}: {request.error}")
    return request


def failure_status(exc: Exception) -> tuple[grpc.Status, str]:
    """The status a request that raised ``exc`` is answered with, and its code's name as the
    request metrics count it: INVALID_ARGUMENT with the field for a request-shape error
    (:class:`BadRequestError`), the engine's reason for its errors, INTERNAL (logged) for
    anything unexpected (status.py)."""
    if isinstance(exc, BadRequestError):
        return exc.to_status(), "INVALID_ARGUMENT"
    mapping = status.classify(exc)
    return status.to_status(exc), mapping.code.name if mapping is not None else "INTERNAL"


def _code_name(context: grpc.aio.ServicerContext) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


class RpcBase:
    """The state every family of Broker RPC handlers reads, set by
    :class:`~stratalog.server.rpc.service.BrokerService`'s constructor, and the helpers they
    share. Event-loop only."""

    _replicas: ReplicaManager
    _log_manager: LogManager
    _placement: AppendPlacement
    _coordinator: TransactionCoordinator
    _settings: Settings
    _metrics: ServerMetrics
    _executor: Executor
    _time_ms: Callable[[], int]
    _topic_names: ValidTopicNames
    _limits: ClientLimits
    _subscribe_budget: SubscribeBudget
    _shared_messages: SharedMessages
    _authorizer: Authorizer | None
    _admin: AdminManager
    advertised_address: str

    def _topic(self, name: str, field: str = "topic") -> str:
        """``name`` if it is a valid topic name: the engine's rules, the request's field name."""
        try:
            return self._topic_names.check(name)
        except InvalidTopicError as exc:  # the engine's description of the fault
            raise BadRequestError(field, str(exc), "INVALID_TOPIC") from None

    async def _blocking(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking storage call in the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args))

    async def admin(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a LogManager admin call in the executor, one at a time (the serving layer's
        admin lock)."""
        return await self._replicas.admin(function, *args)
