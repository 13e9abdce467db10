"""The client's routing core: where a request about a partition goes, and what to do when it
fails. Sans-IO (as h11's connection state machine): it does no I/O and never waits; it is fed
answers, errors and the clock, and says what to do next. The async
:class:`~stratalog.client.Client` and the blocking :class:`~stratalog.client.SyncClient` drive
the same decisions, each with its own short I/O loops (their ``_to_leader``, ``_call``,
``_fetch_metadata``, ``_known_elsewhere`` and ``_describe_until_known``), after Kafka's
``NetworkClient`` and ``Metadata`` (and KIP-951's leader hints).

The parts:

* :func:`reroute`: what one error says about the cluster (it updates the cache) and whether
  the request goes again, and when;
* :class:`Routing`: the client's routing state, shared by its requests: the bootstrap targets,
  the :class:`~.metadata_cache.MetadataCache`, the *home* broker (admin requests go there, and
  partition requests while no leader is known), and whether requests are routed by metadata;
* :class:`LeaderRouter`: one request's way to its partition's leader, as a sequence of
  :class:`Step` values (send to an address, refresh the topic's metadata, ask whether the topic
  is known elsewhere, back off, raise) within the request's deadline;
* :class:`BrokerWalk`: one request any broker answers (Metadata, topics, transactions, ACLs),
  asked of the brokers in turn until one answers, within its deadline;
* :class:`TopicCheck`: a :class:`CheckTopic`'s steps (learn whether this is a cluster, refresh
  the topic, then whether a leader of the partition is known);
* :class:`NewTopicWait`: a DescribeTopic of a topic one server did not know, asked of every
  server in turn for up to :data:`NEW_TOPIC_WAIT_MS`.

A client with one bootstrap target does not know whether it talks to a cluster until a server
says it does not lead a partition; on the two error paths above it asks the home server's
Metadata once (:class:`AskCluster`, :meth:`Routing.take_cluster`) to find out.

What :func:`reroute` decides, per error:

=========================================  ==============================================
the error                                   what the client does
=========================================  ==============================================
NOT_LEADER_OR_FOLLOWER with a hint naming   :attr:`Reroute.NOW`: to that leader, at once,
another node                                the hint taken into the cache
NOT_LEADER_OR_FOLLOWER without a usable     :attr:`Reroute.AFTER_BACKOFF`: the topic is
hint, LEADER_NOT_AVAILABLE,                 marked stale; after ``retry_backoff_ms`` a
UNKNOWN_LEADER_EPOCH                        metadata refresh names the leader
the broker did not answer (UNAVAILABLE      AFTER_BACKOFF for a read (sent again is
without ErrorInfo, SHUTTING_DOWN), in a     harmless) and for a request that was never
cluster (several targets or brokers)        sent (no connection); :attr:`Reroute.RAISE` for
                                            a Produce that may have been sent (its append
                                            may have happened: the Producer resends it
                                            under its sequence numbers). Either way the
                                            topic is refreshed before its next request,
                                            and the broker is asked for metadata last
                                            until it answers again.
anything else, or a broker that did not     RAISE, the cache untouched (a single server:
answer when only one is known               nothing to learn)
=========================================  ==============================================

Nothing was done by a server that answered one of the routing errors, so a Produce too is sent
again at once. UNKNOWN_TOPIC_OR_PARTITION is raised unless a metadata refresh names a leader of
the partition: then the server that refused it lags (a topic just created in a cluster), and
the request goes again after a backoff (:attr:`CheckTopic`).

Concurrency: not thread-safe; the async Client uses it from its event loop, the SyncClient
under its lock (the steps are computed under it, the I/O they ask for is done outside it).
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Sequence

import grpc

from .errors import (
    BrokerUnavailableError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    RequestTimeoutError,
    ShuttingDownError,
    StratalogError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from .metadata_cache import NO_LEADER, MetadataCache
from .types import ClusterMetadata

__all__ = [
    "ATTEMPT_TIME_MIN_S",
    "NEW_TOPIC_WAIT_MS",
    "NOT_THERE",
    "REROUTES_MAX",
    "ROUTING_ERRORS",
    "UNANSWERED",
    "AskCluster",
    "Attempt",
    "Backoff",
    "BrokerWalk",
    "CheckTopic",
    "Found",
    "LeaderRouter",
    "NewTopicWait",
    "Raise",
    "Refresh",
    "Reroute",
    "Routing",
    "Send",
    "Step",
    "TopicCheck",
    "reroute",
]

logger = logging.getLogger("stratalog.client.client")

#: "This server does not lead the partition now": nothing was done; ask the leader.
ROUTING_ERRORS = (NotLeaderOrFollowerError, LeaderNotAvailableError, UnknownLeaderEpochError)

#: A broker that did not answer, or is stopping: another may lead the partition now.
UNANSWERED = (BrokerUnavailableError, ShuttingDownError)

#: Reroutes of one request without a deadline, at most (a request with one stops at it).
REROUTES_MAX = 100

#: An attempt with less time than this left could only time out.
ATTEMPT_TIME_MIN_S = 0.001

#: How long a client in a cluster keeps asking about a topic that a server did not know
#: (DescribeTopic): a topic just created reaches every server's view within a poll interval
#: (docs/cluster.md). Kafka's producer waits ``max.block.ms`` (60 s) for any topic missing from
#: its metadata; a shorter wait tells a misspelt topic sooner.
NEW_TOPIC_WAIT_MS = 5_000

#: A server's answer to a :class:`NewTopicWait` attempt that sends it to the next server: it
#: does not know the topic (its view may lag), or it did not answer.
NOT_THERE = (UnknownTopicOrPartitionError, *UNANSWERED)


class Reroute(enum.Enum):
    """When a failed request about a partition goes out again."""

    NOW = enum.auto()  # a hint named the leader
    AFTER_BACKOFF = enum.auto()  # after retry_backoff_ms, the topic refreshed first
    RAISE = enum.auto()  # not again: the error is the caller's


def reroute(
    cache: MetadataCache,
    error: StratalogError,
    *,
    topic: str,
    partition: int,
    refused_by: str | None,
    cluster: bool,
    resendable: bool,
) -> Reroute:
    """What to do after ``error`` answered a request about ``topic``-``partition`` sent to
    ``refused_by`` (an address; None when no broker was reached). ``cluster``: several
    bootstrap targets or brokers are known; ``resendable``: the request may be sent twice
    (a read). Updates ``cache`` with what the error says (a hint, a stale topic, a gone node,
    an unreachable address).
    """
    refused_node = None if refused_by is None else cache.node_at(refused_by)
    if isinstance(error, NotLeaderOrFollowerError):
        hint = error.leader_id
        if hint is not None and hint != refused_node and cache.apply_hint(
            topic, partition, hint, error.leader_epoch, error.leader_address
        ):
            return Reroute.NOW
        cache.invalidate(topic)
        return Reroute.AFTER_BACKOFF
    if isinstance(error, ROUTING_ERRORS):
        cache.invalidate(topic)
        return Reroute.AFTER_BACKOFF
    if isinstance(error, UNANSWERED) and cluster:
        if refused_by is not None:
            cache.mark_unreachable(refused_by)
        if refused_node is not None:
            cache.forget_node(refused_node)
        cache.invalidate(topic)
        return Reroute.AFTER_BACKOFF if resendable else Reroute.RAISE
    return Reroute.RAISE


class Routing:
    """The routing state of one client, shared by all its requests.

    Holds the bootstrap ``targets`` (at least one), the ``cache``, ``home`` (the address admin
    requests go to first, and partition requests while no route is known: the first bootstrap
    target, then the broker that last answered a metadata or admin request),
    ``route_by_metadata`` (at once with several bootstrap targets, a cluster; with one, only
    after a server said it does not lead a partition: a single server never does, so it costs
    no Metadata call; never goes back to False), ``retry_backoff_s`` (Kafka's
    ``retry.backoff.ms``: the wait before a request goes again after a routing error without a
    usable hint, and the least time between two metadata refreshes) and when the last refresh
    ended, on the client's clock. Pure: no I/O, no clock of its own.
    """

    def __init__(
        self, targets: Sequence[str], cache: MetadataCache, *, retry_backoff_s: float
    ) -> None:
        assert targets, "at least one bootstrap target"
        self.targets = tuple(targets)
        self.cache = cache
        self.home = self.targets[0]
        self.route_by_metadata = len(self.targets) > 1
        self.retry_backoff_s = retry_backoff_s
        self._refreshed_at = -float("inf")  # when the last refresh ended (answered or not)

    def in_cluster(self) -> bool:
        """Whether other servers may lead what one does not: several bootstrap targets,
        several brokers in a Metadata answer, or a server that said it does not lead."""
        return len(self.targets) > 1 or self.route_by_metadata or self.cache.is_cluster

    def candidates(self) -> list[str]:
        """Where a metadata or admin request goes, in turn: home first, the brokers known and
        the bootstrap targets, the unreachable ones last (:meth:`MetadataCache.candidates`)."""
        return self.cache.candidates(self.targets, self.home)

    def refresh_wait_s(self, topic: str, *, asked_at: float, now: float) -> float | None:
        """Before a refresh of ``topic`` asked for at ``asked_at`` (one at a time: the client
        serialises them): None when one that ended since made it needless, else how long to
        wait first, so that refreshes are ``retry_backoff_s`` apart (<= 0: none)."""
        if self._refreshed_at >= asked_at and not self.cache.needs_refresh(topic):
            return None
        return self._refreshed_at + self.retry_backoff_s - now

    def refresh_ended(self, now: float) -> None:
        """A refresh ended, answered or not."""
        self._refreshed_at = now

    def take_cluster(self, metadata: ClusterMetadata, answered_by: str) -> bool:
        """Take an :class:`AskCluster`'s answer (Metadata about no topics, from ``answered_by``)
        into the cache; route by metadata from now on if it names other brokers. Whether it
        does (this client talks to a cluster)."""
        self.cache.update(metadata, answered_by)
        if self.cache.is_cluster:
            self.route_by_metadata = True
        return self.cache.is_cluster

    def leader(self, topic: str, partition: int) -> str:
        """The address of the partition's leader as the cache has it (refresh it first when
        :meth:`MetadataCache.needs_refresh`); home for a partition the cluster does not know,
        whose answer (UNKNOWN_TOPIC_OR_PARTITION) is the caller's.

        Raises:
            LeaderNotAvailableError: the partition has no leader now (retriable).
        """
        route = self.cache.route(topic, partition)
        if route is not None:
            return route.address
        if self.cache.leader_of(topic, partition) == NO_LEADER:
            raise LeaderNotAvailableError(
                f"{topic}-{partition} has no leader now (an election is pending)",
                code=grpc.StatusCode.UNAVAILABLE,
            )
        return self.home

    def learn(
        self, error: StratalogError, *, topic: str, partition: int, refused_by: str | None,
        resendable: bool,
    ) -> Reroute:
        """Take what ``error`` of a request about the partition sent to ``refused_by`` says
        (:func:`reroute`); a routing error makes this client route by metadata from now on."""
        if isinstance(error, ROUTING_ERRORS) and not self.route_by_metadata:
            self.route_by_metadata = True
            logger.info("%s: routing by metadata from now on", error)
        return reroute(
            self.cache, error, topic=topic, partition=partition, refused_by=refused_by,
            cluster=self.in_cluster(), resendable=resendable,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """Send the request to ``address``: first wait for its connection when ``connect``
    (:meth:`LeaderRouter.connect_failed` if there is none), then send it with
    :meth:`LeaderRouter.timeout_s` (:meth:`LeaderRouter.send_failed` if it fails)."""

    address: str
    connect: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Refresh:
    """Refresh the topic's metadata (at most one refresh per ``retry_backoff_ms``: the client's
    to keep), then ask again; :meth:`LeaderRouter.refresh_failed` if it fails."""


@dataclasses.dataclass(frozen=True, slots=True)
class CheckTopic:
    """After UNKNOWN_TOPIC_OR_PARTITION: ask whether a metadata refresh names a leader of the
    partition (the server that refused it lags), and tell :meth:`LeaderRouter.topic_checked`."""


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Wait ``delay_s``, then ask again."""

    delay_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class Raise:
    """Give up: raise ``error`` (``raise step.error``; its cause is set already)."""

    error: StratalogError


Step = Send | Refresh | CheckTopic | Backoff | Raise


class _Phase(enum.Enum):
    """Where a LeaderRouter is: FIRST, or LOCATE -> (REFRESHING ->) ROUTE -> SENT; a failure
    goes to DECIDE (-> CHECKING), then back to LOCATE or to DONE."""

    FIRST = enum.auto()  # one target, not routing by metadata: the home server, unconnected
    SENT_FIRST = enum.auto()  # FIRST's Send is out: waiting for send_failed (or the answer)
    LOCATE = enum.auto()  # find the leader, refreshing the topic first if needed
    REFRESHING = enum.auto()  # waiting for refreshed / refresh_failed
    ROUTE = enum.auto()  # the cache is as fresh as it gets: pick the address
    SENT = enum.auto()  # waiting for connect_failed / send_failed (or the answer: done)
    DECIDE = enum.auto()  # an attempt failed: learn from the error, then locate or raise
    CHECKING = enum.auto()  # waiting for topic_checked
    DONE = enum.auto()  # a Raise was returned: it is returned again


class LeaderRouter:
    """One request about ``topic``-``partition``, on its way to the partition's leader.

    Call :meth:`next_step` with the clock, do what the :class:`Step` says, report how it
    went, and call :meth:`next_step` again, until the request is answered (then just stop) or
    a :class:`Raise` comes. At most :data:`REROUTES_MAX` reroutes, and never past the
    deadline (``timeout_s`` from ``now``; ``None``: none). ``resendable``: the request may
    be sent twice (a read); a Produce is sent again only when it was provably never sent
    (no connection, or :attr:`BrokerUnavailableError.unsent`) or a server answered that it
    does nothing with it (a routing error).

    Holds the request's deadline, the reroutes so far, the last error, the address it went
    to last and whether it was sent there. Pure and single-use; a report that does not follow
    the step that asks for it is the driver's bug (AssertionError).
    """

    def __init__(
        self, routing: Routing, topic: str, partition: int, *, resendable: bool,
        timeout_s: float | None, now: float,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.deadline = None if timeout_s is None else now + timeout_s
        self._routing = routing
        self._resendable = resendable
        self._timeout_s = timeout_s
        self._phase = _Phase.LOCATE if routing.route_by_metadata else _Phase.FIRST
        self._error: StratalogError | None = None
        self._refused_by: str | None = None  # where the last attempt went
        self._unsent = False  # the last attempt was provably not sent
        self._reroutes = 0
        self._decision: Reroute | None = None  # of CheckTopic
        self._raised: Raise | None = None

    def timeout_s(self, now: float) -> float | None:
        """The time left for the attempt under way (at least :data:`ATTEMPT_TIME_MIN_S`)."""
        if self.deadline is None:
            return None
        return max(self.deadline - now, ATTEMPT_TIME_MIN_S)

    def next_step(self, now: float) -> Step:
        """What to do now."""
        while True:
            phase = self._phase
            if phase is _Phase.FIRST:
                self._phase = _Phase.SENT_FIRST
                self._refused_by = self._routing.home
                return Send(self._routing.home, connect=False)
            if phase is _Phase.DONE:
                assert self._raised is not None
                return self._raised
            if phase is _Phase.DECIDE:
                step = self._decide(now)
                if step is not None:
                    return step
            elif phase is _Phase.LOCATE:
                if self.deadline is not None and self.deadline - now <= ATTEMPT_TIME_MIN_S:
                    return self._raise(self._error or RequestTimeoutError(
                        f"{self.topic}-{self.partition}: no leader found within"
                        f" {self._timeout_s} s",
                        code=grpc.StatusCode.DEADLINE_EXCEEDED,
                    ))
                self._phase = _Phase.ROUTE
                if self._routing.cache.needs_refresh(self.topic):
                    self._phase = _Phase.REFRESHING
                    return Refresh()
            elif phase is _Phase.ROUTE:
                try:
                    address = self._routing.leader(self.topic, self.partition)
                except LeaderNotAvailableError as err:
                    self._failed(err, self._refused_by, self._unsent)
                    continue
                self._phase = _Phase.SENT
                self._refused_by = address
                return Send(address, connect=True)
            else:
                raise AssertionError(f"next_step while {phase.name}")

    def _decide(self, now: float) -> Step | None:
        """After a failed attempt: learn from its error; a Step, or None to locate the leader
        at once."""
        error = self._error
        assert error is not None
        if self._decision is not None:
            decision, self._decision = self._decision, None
        elif isinstance(error, UnknownTopicOrPartitionError):
            self._phase = _Phase.CHECKING
            return CheckTopic()
        else:
            decision = self._routing.learn(
                error, topic=self.topic, partition=self.partition,
                refused_by=self._refused_by, resendable=self._resendable or self._unsent,
            )
        self._reroutes += 1
        if decision is Reroute.RAISE or self._reroutes > REROUTES_MAX:
            return self._raise(error)
        self._phase = _Phase.LOCATE
        if decision is Reroute.AFTER_BACKOFF:
            delay_s = self._routing.retry_backoff_s
            if self.deadline is not None:
                delay_s = min(delay_s, self.deadline - now)
            if delay_s > 0:
                return Backoff(delay_s)
        return None

    def _raise(self, error: StratalogError) -> Raise:
        self._phase = _Phase.DONE
        self._raised = Raise(error)
        return self._raised

    def _failed(self, error: StratalogError, refused_by: str | None, unsent: bool) -> None:
        self._error, self._refused_by, self._unsent = error, refused_by, unsent
        self._phase = _Phase.DECIDE

    # --- what happened: one call after each Step that asks for it ----------------------------

    def connect_failed(self, error: StratalogError) -> None:
        """No connection to the Send's address: the request was not sent."""
        assert self._phase is _Phase.SENT
        self._failed(error, self._refused_by, True)

    def send_failed(self, error: StratalogError) -> None:
        """The request failed: sent, unless gRPC said it found no connection
        (:attr:`BrokerUnavailableError.unsent`)."""
        assert self._phase in (_Phase.SENT, _Phase.SENT_FIRST)
        first = self._phase is _Phase.SENT_FIRST
        unsent = isinstance(error, BrokerUnavailableError) and error.unsent
        self._failed(error, self._refused_by, unsent)
        if first and not isinstance(error, (*ROUTING_ERRORS, UnknownTopicOrPartitionError)):
            # One target, and it answered for itself (a single server): nothing to learn.
            self._raise(error)

    def refreshed(self) -> None:
        """The Refresh was done."""
        assert self._phase is _Phase.REFRESHING
        self._phase = _Phase.ROUTE

    def refresh_failed(self, error: StratalogError) -> None:
        """The Refresh failed. A refresh cut by the deadline ends the request with the error
        that made it (the news), else with the timeout; any other failure is learnt from as
        the request's own (the address it went to last stays the one blamed)."""
        assert self._phase is _Phase.REFRESHING
        if isinstance(error, RequestTimeoutError):
            if self._error is not None:
                self._error.__cause__ = error
                self._raise(self._error)
            else:
                self._raise(error)
            return
        self._failed(error, self._refused_by, self._unsent)

    def topic_checked(self, known_elsewhere: bool) -> None:
        """The CheckTopic's answer: whether a refresh named a leader of the partition."""
        assert self._phase is _Phase.CHECKING
        self._decision = Reroute.AFTER_BACKOFF if known_elsewhere else Reroute.RAISE
        self._phase = _Phase.DECIDE


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """Ask ``address`` (connecting first), with ``timeout_s`` left of the request's deadline
    (None: no deadline)."""

    address: str
    timeout_s: float | None


class BrokerWalk:
    """One request that any broker answers (Metadata, and the admin requests: topics,
    transactions, ACLs), asked of the candidates in turn until one answers, within its deadline.

    The candidates are :meth:`Routing.candidates` when the walk starts: home first, then the
    brokers known and the bootstrap targets, the unreachable ones last. A broker that does not
    answer (:data:`UNANSWERED`) is marked unreachable, so that this request and the next ones
    ask it last (Kafka's ``NetworkClient.leastLoadedNode`` skips a node in reconnect backoff
    the same way), and the next candidate is asked. For Metadata about topics, a broker that
    does not know one (UNKNOWN_TOPIC_OR_PARTITION) may only lag (a topic just created): the
    next is asked as well, and when every broker that answered said so, the topics are gone
    (:meth:`topics_unknown`).

    Holds the candidates left, the deadline, the first and last error of a broker that did not
    answer, and the last UNKNOWN_TOPIC_OR_PARTITION. Pure and single-use; the driver connects,
    calls, and makes the broker that answered its home.
    """

    def __init__(self, routing: Routing, *, deadline: float | None) -> None:
        self.deadline = deadline  # the request's, on the driver's clock; None: none
        self._routing = routing
        self._candidates = routing.candidates()
        self._next = 0
        self.first_error: StratalogError | None = None  # of a broker that did not answer
        self.last_error: StratalogError | None = None
        self._unknown: UnknownTopicOrPartitionError | None = None

    def next_attempt(self, now: float) -> Attempt | None:
        """The next broker to ask; None when every candidate was asked or the deadline passed."""
        if self._next >= len(self._candidates):
            return None
        remaining = None if self.deadline is None else self.deadline - now
        if remaining is not None and remaining <= 0:
            return None
        self._next += 1
        return Attempt(self._candidates[self._next - 1], remaining)

    def unanswered(self, address: str, error: StratalogError) -> None:
        """``address`` did not answer (an :data:`UNANSWERED` error): asked last from now on."""
        self._routing.cache.mark_unreachable(address)
        self.first_error = self.first_error or error
        self.last_error = error

    def unknown_topic(self, error: UnknownTopicOrPartitionError) -> None:
        """The broker asked does not know a topic of the Metadata request (its view may lag)."""
        self._unknown = error

    def topics_unknown(self, topics: Sequence[str]) -> bool:
        """After the walk: whether every broker that answered did not know ``topics`` (then
        they are forgotten: not, or no longer, there)."""
        if self._unknown is None:
            return False
        for topic in topics:
            self._routing.cache.forget(topic)
        return True

    @staticmethod
    def timed_out(message: str) -> RequestTimeoutError:
        """The error when no broker was asked before the deadline (none failed)."""
        return RequestTimeoutError(message, code=grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclasses.dataclass(frozen=True, slots=True)
class AskCluster:
    """Ask the home server's Metadata about no topics within ``timeout_s`` (None: no deadline),
    to learn whether this client talks to a cluster; tell ``cluster_answered`` (with the answer
    and the address that gave it) or ``cluster_unanswered`` (any error)."""

    timeout_s: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """A :class:`TopicCheck`'s answer: whether a metadata refresh named a leader of the
    partition."""

    known: bool


class _Check(enum.Enum):
    """Where a TopicCheck or a NewTopicWait is."""

    CLUSTER = enum.auto()  # learn whether this is a cluster (an AskCluster unless known)
    ASKING = enum.auto()  # the AskCluster is out
    GO = enum.auto()  # a cluster: refresh the topic (TopicCheck), start a round (NewTopicWait)
    WAITING = enum.auto()  # the Refresh is out (TopicCheck); a round under way (NewTopicWait)
    DONE = enum.auto()


class TopicCheck:
    """The steps of a :class:`LeaderRouter`'s :class:`CheckTopic`: after
    UNKNOWN_TOPIC_OR_PARTITION, whether a metadata refresh names a leader of ``topic``-
    ``partition`` (then the server that refused it lags). A client that does not know whether
    it talks to a cluster asks first (:class:`AskCluster`, one Metadata call on this error path
    only): a single server that does not have the topic says so again, so the answer is
    ``Found(False)`` without a refresh. In a cluster the topic is marked stale and refreshed
    (:class:`Refresh`); a refresh that fails answers ``Found(False)``.

    Call :meth:`next_step` until it returns :class:`Found`, reporting each step. Pure and
    single-use; a report that does not follow its step is the driver's bug (AssertionError).
    """

    def __init__(
        self, routing: Routing, topic: str, partition: int, *, deadline: float | None
    ) -> None:
        self._routing = routing
        self._topic = topic
        self._partition = partition
        self._deadline = deadline  # the request's, on the driver's clock; None: none
        self._phase = _Check.CLUSTER
        self._known = False

    def next_step(self, now: float) -> AskCluster | Refresh | Found:
        """What to do now."""
        if self._phase is _Check.CLUSTER:
            if not self._routing.in_cluster():
                self._phase = _Check.ASKING
                return AskCluster(None if self._deadline is None else self._deadline - now)
            self._phase = _Check.GO
        if self._phase is _Check.GO:
            self._routing.cache.invalidate(self._topic)
            self._phase = _Check.WAITING
            return Refresh()
        assert self._phase is _Check.DONE, f"next_step while {self._phase.name}"
        return Found(self._known)

    def cluster_answered(self, metadata: ClusterMetadata, answered_by: str) -> None:
        """The AskCluster's answer."""
        assert self._phase is _Check.ASKING
        self._phase = _Check.GO if self._routing.take_cluster(metadata, answered_by) \
            else _Check.DONE

    def cluster_unanswered(self) -> None:
        """The AskCluster failed: nothing known elsewhere."""
        assert self._phase is _Check.ASKING
        self._phase = _Check.DONE

    def refreshed(self) -> None:
        """The Refresh was done: the partition is known elsewhere if the cache names a route."""
        assert self._phase is _Check.WAITING
        self._known = self._routing.cache.route(self._topic, self._partition) is not None
        self._phase = _Check.DONE

    def refresh_failed(self) -> None:
        """The Refresh failed: nothing known elsewhere."""
        assert self._phase is _Check.WAITING
        self._phase = _Check.DONE


class NewTopicWait:
    """A DescribeTopic of a topic one server did not know (UNKNOWN_TOPIC_OR_PARTITION): asked of
    every server in turn until one knows it, for up to :data:`NEW_TOPIC_WAIT_MS` within the
    request's ``timeout_s`` (a topic just created reaches every server's view within a poll
    interval). A client that does not know whether it talks to a cluster asks first
    (:class:`AskCluster`); not a cluster, or no answer: it gives up at once.

    The rounds: each asks :meth:`Routing.candidates` as they are when it starts (home first,
    the unreachable last), each :class:`Attempt` with the time left; an attempt answered with
    one of :data:`NOT_THERE` goes on to the next candidate (the driver just asks
    :meth:`next_step` again), any other error is the caller's; after a round, a
    :class:`Backoff` of ``retry_backoff_s`` (cut at the end of the wait). :meth:`next_step`
    returns None when the wait is over: the caller raises the first UNKNOWN_TOPIC_OR_PARTITION.

    Holds the end of the wait, the round's candidates and the next one. Pure and single-use.
    """

    def __init__(self, routing: Routing, *, timeout_s: float | None, now: float) -> None:
        self._routing = routing
        self._timeout_s = timeout_s
        self.wait_until = now + NEW_TOPIC_WAIT_MS / 1000  # on the driver's clock
        if timeout_s is not None:
            self.wait_until = min(self.wait_until, now + timeout_s)
        self._phase = _Check.CLUSTER
        self._round: list[str] = []
        self._next = 0

    def next_step(self, now: float) -> AskCluster | Attempt | Backoff | None:
        """What to do now; None: give up."""
        if self._phase is _Check.CLUSTER:
            if not self._routing.in_cluster():
                self._phase = _Check.ASKING
                return AskCluster(self._timeout_s)
            self._phase = _Check.GO
        if self._phase is _Check.GO:
            if now >= self.wait_until:
                self._phase = _Check.DONE
            else:
                self._round, self._next = self._routing.candidates(), 0
                self._phase = _Check.WAITING
        if self._phase is _Check.DONE:
            return None
        assert self._phase is _Check.WAITING, f"next_step while {self._phase.name}"
        if self._next < len(self._round):
            remaining = self.wait_until - now
            if remaining <= 0:
                self._phase = _Check.DONE
                return None
            self._next += 1
            return Attempt(self._round[self._next - 1], remaining)
        self._phase = _Check.GO
        return Backoff(max(0.0, min(self._routing.retry_backoff_s, self.wait_until - now)))

    def cluster_answered(self, metadata: ClusterMetadata, answered_by: str) -> None:
        """The AskCluster's answer."""
        assert self._phase is _Check.ASKING
        self._phase = _Check.GO if self._routing.take_cluster(metadata, answered_by) \
            else _Check.DONE

    def cluster_unanswered(self) -> None:
        """The AskCluster failed: give up."""
        assert self._phase is _Check.ASKING
        self._phase = _Check.DONE
