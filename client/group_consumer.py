"""The group Consumer's driver: the I/O around the sans-IO group member.

``Consumer(client, topics=[...] or pattern=..., group_id=...)`` hands its group work to one
:class:`GroupDriver`, which owns a :class:`~.groups.GroupMembership` (the member: Kafka's
AbstractCoordinator + ConsumerCoordinator, which does no I/O) and carries out the actions of
every :class:`~.groups.membership_messages.Output` in order, as the table of docs/client.md
("How the Consumer drives it") says:

* ``Send`` -> the RPC, in a task of its own (``Client.group_request``: FindCoordinator to any
  server, the rest to the coordinator's address; JoinGroup/SyncGroup wait up to the rebalance
  timeout plus the request timeout), then ``on_response`` or ``on_error``, exactly once;
* ``PartitionsRevoked``/``PartitionsLost`` -> the Consumer stops those fetchers and drops what
  they fetched ahead, then the application's callback;
* ``PartitionsAssigned`` -> the callback (fetching waits for ``StartPositions``);
* ``StartPositions`` -> the Consumer starts fetchers at the committed offsets; for a reset
  a task looks up the earliest or latest offset (ListOffsets), ``seek``\\ s the member there
  and starts the fetcher; a NoOffsetForPartitionError is raised at the reader's polls until
  it seeks those partitions;
* ``NeedPartitionCounts`` -> a task asks DescribeTopic per topic (0 for a missing one), then
  ``partition_counts``;
* ``CommitDone`` -> the commit's future; ``Failed`` -> raised at the reader's next poll;
  ``Closed`` -> ``close()`` returns.

Then one timer is armed at ``next_deadline_ms`` (``tick``). Every call into the member happens on
the event loop, from the reader's poll, a timer, a finished RPC task or an application call, so
the loop serialises them: the member has one caller at a time, as it requires. Each carries
out its own Output before returning. Before each call the driver tells the member where the
reader is in the batch it is handing out record by record (``handed_out``), so a commit covers
exactly the records the reader was given.

Every ``metadata_max_age_ms`` a task re-reads the cluster: a pattern's matching topics
(``subscribe`` when they change) and the subscribed topics' partition counts
(``partition_counts``: a leader rejoins when a count changed).

Bounded: the member keeps at most one request of each kind in flight (64 commits), so the
driver's RPC tasks are few; one timer; one metadata task. Event-loop only. Crash behaviour: no
state of its own outlives the process; the group's committed offsets are the server's, and the
coordinator removes a dead member after its session timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import errors
from .groups import GroupMembership, GroupMetadata, MembershipConfig
from .groups import membership_messages as m
from .types import TopicPartition
from .wire import EARLIEST, LATEST

if TYPE_CHECKING:
    from .client import Client
    from .consumer import Consumer

__all__ = ["CLOSE_TIMEOUT_S", "GroupDriver", "RebalanceCallback"]

logger = logging.getLogger(__name__)

#: An application's rebalance callback: called on the event loop with the partitions
#: (Kafka's ConsumerRebalanceListener methods); it must not block.
RebalanceCallback = Callable[[frozenset[TopicPartition]], None]

#: How long ``close()`` waits for the member's commit and LeaveGroup.
CLOSE_TIMEOUT_S = 30.0

#: Internal topics a pattern never matches (Kafka's ``exclude.internal.topics``).
_INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


class GroupDriver:
    """Carries out a GroupMembership's actions for one Consumer (module docstring).

    Holds the member, its timer, the RPC tasks in flight, the commit futures (as the member's
    tokens) and the member's failure. Invariant: every Send's task reports exactly once
    (``on_response``/``on_error``), or is cancelled by ``close`` after the member closed or
    timed out. Event-loop only.
    """

    def __init__(
        self, consumer: Consumer, client: Client, *, config: MembershipConfig,
        pattern: re.Pattern[str] | None,
        callbacks: tuple[RebalanceCallback | None, RebalanceCallback | None,
                         RebalanceCallback | None],
        metadata_max_age_ms: int,
    ) -> None:
        self._consumer = consumer
        self._client = client
        self._config = config
        self._pattern = pattern
        self._on_assigned, self._on_revoked, self._on_lost = callbacks
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        self._loop = asyncio.get_running_loop()
        self._member: GroupMembership | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None
        self._failure: BaseException | None = None
        #: The first error of an application's rebalance callback not raised to the reader yet
        #: (raised once, at its next poll; the member goes on, as Kafka's consumer does).
        self._callback_error: BaseException | None = None
        self._no_offset: tuple[errors.StratalogError, set[TopicPartition]] | None = None
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._metadata_task: asyncio.Task[None] | None = None
        self._member_ready = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self._config.group_id

    @property
    def topics(self) -> frozenset[str]:
        return self._member.topics if self._member is not None else frozenset()

    async def start(self) -> None:
        """Make the member (a pattern: once it matches a topic) and start the timer."""
        if self._pattern is None:
            self._start_member(self._config)
        else:
            topics = await self._matching_topics()
            if topics:
                self._start_member(self._config_with(topics))
        self._metadata_task = self._loop.create_task(self._metadata_loop())

    def _config_with(self, topics: Iterable[str]) -> MembershipConfig:
        """The settings with the topics a pattern matched."""
        return dataclasses.replace(self._config, topics=tuple(sorted(topics)))

    def _start_member(self, config: MembershipConfig) -> None:
        self._member = GroupMembership(config, self._now_ms())
        self._member_ready.set()
        self._carry_out(self._member.tick(self._now_ms()))

    async def close(self) -> None:
        """Commit (auto-commit on), revoke, leave (dynamic members); wait for the member's
        Closed up to CLOSE_TIMEOUT_S, then stop every task."""
        try:
            if self._member is not None and self._failure is None:
                self._call(lambda now: self._member.close(now))  # type: ignore[union-attr]
                try:
                    await asyncio.wait_for(asyncio.shield(self._closed), CLOSE_TIMEOUT_S)
                except TimeoutError:
                    logger.warning("group %s: close did not finish within %s s (commit or "
                                   "LeaveGroup unanswered)", self.group_id, CLOSE_TIMEOUT_S)
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            tasks = list(self._tasks)
            if self._metadata_task is not None:
                tasks.append(self._metadata_task)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    # -- the application's and the reader's calls ------------------------------------------

    def assignment(self) -> frozenset[TopicPartition]:
        return self._member.assignment if self._member is not None else frozenset()

    def group_metadata(self) -> GroupMetadata:
        if self._member is None:
            return GroupMetadata(self.group_id, -1, "", self._config.group_instance_id)
        return self._member.group_metadata()

    def handed_out(self, tp: TopicPartition, offset: int) -> None:
        if self._member is not None:
            self._member.handed_out(tp, offset)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The application's seek: the member's position (ValueError if not assigned)."""
        if self._member is None:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this Consumer")
        self._member.seek(tp, offset)
        if self._no_offset is not None:
            self._no_offset[1].discard(tp)
            if not self._no_offset[1]:
                self._no_offset = None

    def reader_polled(self) -> None:
        """A poll: raises the member's failure, or a pending NoOffsetForPartitionError."""
        if self._failure is not None:
            raise self._failure
        if self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error
        if self._no_offset is not None:
            raise self._no_offset[0]
        member = self._member
        if member is not None and not member.poll_noted(self._now_ms()):
            self._call(member.reader_polled)

    async def commit(self, offsets: Mapping[TopicPartition, int] | None,
                     timeout_s: float | None) -> None:
        """Commit and wait; retriable failures are tried again after a backoff until
        ``timeout_s`` (Kafka's ``commitSync``)."""
        deadline = None if timeout_s is None else self._loop.time() + timeout_s
        backoff_s = self._config.retry_backoff_ms / 1000
        while True:
            future = self.commit_async(offsets, None)
            try:
                if deadline is None:
                    await future
                else:
                    await asyncio.wait_for(future, max(0.0, deadline - self._loop.time()))
                return
            except TimeoutError:
                raise errors.RequestTimeoutError(
                    f"the commit to group {self.group_id!r} was not answered within "
                    f"{timeout_s} s") from None
            except errors.StratalogError as err:
                if not err.retriable or (deadline is not None
                                         and self._loop.time() + backoff_s > deadline):
                    raise
                logger.debug("group %s: commit retried after %s", self.group_id, err)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self._config.retry_backoff_max_ms / 1000)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int] | None,
        callback: Callable[[dict[TopicPartition, int], BaseException | None], None] | None,
    ) -> asyncio.Future[dict[TopicPartition, int]]:
        future: asyncio.Future[dict[TopicPartition, int]] = self._loop.create_future()
        if callback is not None:
            def done(f: asyncio.Future[dict[TopicPartition, int]]) -> None:
                error = None if f.cancelled() else f.exception()
                callback({} if error is not None or f.cancelled() else f.result(), error)
            future.add_done_callback(done)
        if self._failure is not None:
            future.set_exception(self._failure)
        elif self._closed.done():
            future.set_exception(errors.CommitFailedError(
                f"the consumer closed: it is no longer a member of group {self.group_id!r}"))
        elif self._member is None:
            future.set_exception(errors.CommitFailedError(
                f"the consumer has not joined group {self.group_id!r}: no topic matches its "
                "pattern yet"))
        else:
            chosen = None if offsets is None else {TopicPartition(*tp): o
                                                   for tp, o in offsets.items()}
            self._call(lambda now: self._member.commit(now, chosen, token=future))  # type: ignore[union-attr]
        return future

    # -- calling the member and carrying out its actions --------------------------------------

    def _now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def _call(self, event: Callable[[int], m.Output]) -> None:
        """Tell the member where the reader is, call it, carry out its Output."""
        member = self._member
        if member is None:
            return
        at = self._consumer._in_hand_position()
        if at is not None:
            member.handed_out(*at)
        try:
            out = event(self._now_ms())
        except Exception as err:  # a bug, or an answer the member cannot take: stop here
            logger.exception("group %s: the group member failed", self.group_id)
            self._fail(err)
            return
        self._carry_out(out)

    def _carry_out(self, out: m.Output) -> None:
        for action in out.actions:
            try:
                self._act(action)
            except Exception as err:  # an application callback's error
                logger.exception("group %s: carrying out %s failed", self.group_id,
                                 type(action).__name__)
                self._fail(err)
        self._arm(out.next_deadline_ms)

    def _act(self, action: m.Action) -> None:
        consumer = self._consumer
        if isinstance(action, m.Send):
            self._spawn(self._send(action))
        elif isinstance(action, m.PartitionsRevoked):
            consumer._remove_partitions(action.partitions)
            if self._on_revoked is not None and action.partitions:
                self._callback(self._on_revoked, action.partitions)
        elif isinstance(action, m.PartitionsLost):
            consumer._remove_partitions(action.partitions)
            if self._on_lost is not None and action.partitions:
                self._callback(self._on_lost, action.partitions)
        elif isinstance(action, m.PartitionsAssigned):
            if self._on_assigned is not None:
                self._callback(self._on_assigned, action.added)
        elif isinstance(action, m.StartPositions):
            for tp, (offset, _epoch) in action.committed.items():
                consumer._add_partition(tp, offset)
            if action.reset:
                self._spawn(self._reset(action.reset))
            if action.error is not None:
                missing = set(getattr(action.error, "partitions", ()))
                self._no_offset = (action.error, {TopicPartition(*tp) for tp in missing})
                consumer._wake_reader()
        elif isinstance(action, m.NeedPartitionCounts):
            self._spawn(self._partition_counts(action.topics))
        elif isinstance(action, m.CommitDone):
            future = action.token
            if isinstance(future, asyncio.Future) and not future.done():
                if action.error is None:
                    future.set_result(action.offsets)
                else:
                    future.set_exception(action.error)
        elif isinstance(action, m.Failed):
            self._fail(action.error)
        elif isinstance(action, m.Closed) and not self._closed.done():
            self._closed.set_result(None)

    def _callback(self, callback: Callable[[frozenset[TopicPartition]], object],
                  partitions: frozenset[TopicPartition]) -> None:
        """An application's rebalance callback. Its error does not stop the member (the
        assignment already changed): it is logged and raised once to the reader at its next
        poll, as Kafka's ConsumerCoordinator raises a listener's error from poll() while the
        consumer stays in the group (an exception left to stop the member stopped its
        heartbeats and left it in the group until its session timeout)."""
        try:
            callback(partitions)
        except Exception as err:
            logger.exception("group %s: a rebalance callback failed", self.group_id)
            if self._callback_error is None:
                self._callback_error = err
            self._consumer._wake_reader()

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
            logger.error("group %s: the consumer stopped: %s", self.group_id, error)
        if not self._closed.done():
            self._closed.set_result(None)
        self._consumer._wake_reader()

    def _arm(self, deadline_ms: int | None) -> None:
        """One timer at the earliest deadline asked for (a later stale one would be missed;
        an early one only ticks once more: the member answers with the deadline due)."""
        if deadline_ms is None or self._failure is not None:
            return
        if self._timer is not None and self._timer_at_ms is not None and (
            self._timer_at_ms <= deadline_ms
        ):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at_ms = deadline_ms
        delay_s = max(0.0, (deadline_ms - self._now_ms()) / 1000)
        self._timer = self._loop.call_later(delay_s, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        if self._member is not None:
            self._call(self._member.tick)

    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the I/O tasks ---------------------------------------------------------------------------

    async def _send(self, send: m.Send) -> None:
        """One Send: the RPC, then exactly one report to the member."""
        failure: errors.StratalogError | None = None
        response: object = None
        try:
            response = await self._client.group_request(
                send.request, send.address, rebalance_timeout_ms=self._config.rebalance_timeout)
        except errors.StratalogError as err:
            failure = err
        except asyncio.CancelledError:
            raise
        except Exception as err:  # not an RPC's error: a bug, reported as the request's
            logger.exception("group %s: %s failed", self.group_id, type(send.request).__name__)
            failure = errors.StratalogError(f"{type(send.request).__name__}: {err!r}")
        member = self._member
        assert member is not None
        if failure is not None:
            self._call(lambda now: member.on_error(send.request_id, failure, now))
        else:
            self._call(lambda now: member.on_response(send.request_id, response, now))

    async def _reset(self, reset: Mapping[TopicPartition, str]) -> None:
        """Partitions without a committed offset: seek the member to ``auto_offset_reset``'s
        offset (ListOffsets), then start their fetchers."""
        consumer = self._consumer
        for tp, policy in sorted(reset.items()):
            if policy not in ("earliest", "latest"):
                continue  # "none": NoOffsetForPartitionError, raised at the polls
            try:
                result = await self._with_retries(
                    lambda tp=tp, policy=policy: consumer._list_offsets(
                        tp, EARLIEST if policy == "earliest" else LATEST))
            except errors.StratalogError as err:
                self._fail(err)
                return
            member = self._member
            if member is None or tp not in member.assignment or (
                member.positions.position(tp) is not None
            ):
                continue  # revoked, or sought by the application meanwhile
            member.seek(tp, result.offset)
            consumer._add_partition(tp, result.offset)

    async def _partition_counts(self, topics: Iterable[str]) -> None:
        counts = {}
        for topic in sorted(topics):
            counts[topic] = await self._partition_count(topic)
        self._call(lambda now: self._member.partition_counts(now, counts))  # type: ignore[union-attr]

    async def _partition_count(self, topic: str) -> int:
        try:
            info = await self._with_retries(lambda: self._client.describe_topic(topic))
        except errors.UnknownTopicOrPartitionError:
            return 0
        except errors.StratalogError as err:
            logger.warning("group %s: no partition count of %s: %s", self.group_id, topic, err)
            return 0
        return info.num_partitions

    async def _with_retries(self, call: Callable[[], Any]) -> Any:
        """``call()`` with the member's backoff, retriable failures tried up to 5 times."""
        backoff_s = self._config.retry_backoff_ms / 1000
        for attempt in range(5):
            try:
                return await call()
            except errors.StratalogError as err:
                if not err.retriable or attempt == 4:
                    raise
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self._config.retry_backoff_max_ms / 1000)
        raise AssertionError("unreachable")

    async def _matching_topics(self) -> frozenset[str]:
        assert self._pattern is not None
        topics = await self._client.list_topics()
        return frozenset(t.name for t in topics if t.name not in _INTERNAL_TOPICS
                         and self._pattern.fullmatch(t.name))

    async def _metadata_loop(self) -> None:
        """Every metadata_max_age_ms: a pattern's matches, the subscribed topics' counts."""
        while True:
            await asyncio.sleep(self._metadata_max_age_s)
            try:
                if self._pattern is not None:
                    topics = await self._matching_topics()
                    if topics and self._member is None:
                        self._start_member(self._config_with(topics))
                    elif topics and self._member is not None and topics != self._member.topics:
                        self._call(lambda now, t=topics: self._member.subscribe(now, sorted(t)))  # type: ignore[union-attr]
                if self._member is not None:
                    await self._partition_counts(self._member.topics)
            except errors.StratalogError as err:
                logger.warning("group %s: metadata refresh failed: %s", self.group_id, err)
