"""One consumer's membership in a group, sans-IO: Kafka's AbstractCoordinator + ConsumerCoordinator.

The consumer's side of Kafka's classic group protocol (issue 27; docs/client.md, "Consumer
groups (the membership core)"), modelled on
``clients/src/main/java/org/apache/kafka/clients/consumer/internals/AbstractCoordinator.java``
and ``ConsumerCoordinator.java``. :class:`GroupMembership` takes events and returns what to do
(:mod:`.membership_messages`): it never sends, awaits, sleeps or reads a clock; every call takes
``now_ms`` and returns an :class:`~.membership_messages.Output`.

Events: ``on_response``/``on_error`` (the outcome of a Send), ``tick`` (a timer fired),
``reader_polled``/``handed_out``/``seek`` (the reader), ``commit``/``close``/``subscribe``
(the application), ``partition_counts`` (metadata the leader asked for).

The member's life (Kafka's MemberState, with the commit before a rebalance made explicit)::

    UNJOINED --(coordinator known)--> PREPARING --(commit done; revoke/lose)--> JOINING
    JOINING --(JoinGroup ok; leader: partition counts)--> SYNCING --(SyncGroup ok)--> STABLE
    STABLE --(rejoin needed: heartbeat REBALANCE_IN_PROGRESS, a revocation, a subscription or
              partition-count change, a poll after max_poll_interval_ms)--> PREPARING
    any --(UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION: partitions lost)--> UNJOINED
    any --(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection)--> find it again
    any --(FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ...)--> failed (fatal)

Rules, each Kafka's unless docs/client.md's "Differences" says otherwise:

* **Joining.** The first JoinGroup carries an empty member id; MEMBER_ID_REQUIRED gives the id to
  join again with at once (KIP-394). The leader runs the group's assignor over every member's
  subscription (:func:`~.assignor.perform_assignment`) once it has the partition counts.
* **Before a join** (:func:`~.assignment_change.before_join`): auto-commit the positions of the
  owned partitions (retriable failures retried until the rebalance timeout), then EAGER revokes
  everything, COOPERATIVE only the partitions of topics no longer subscribed; a member whose
  generation or member id was reset *loses* them instead (no commit).
* **After the sync** (:func:`~.assignment_change.after_sync`): COOPERATIVE revokes what the new
  assignment took away (committing it first) and rejoins at once; the added partitions start at
  their committed offsets (OffsetFetch), else at ``auto_offset_reset``.
* **Heartbeats** every ``heartbeat_interval_ms`` while in a generation; none answered within
  ``session_timeout_ms`` means the coordinator is lost (find it again). With
  ``held_heartbeats`` (ours; docs/groups.md "Held heartbeats") each is sent with
  ``max_wait_ms = heartbeat_interval_ms`` and the next is due ``heartbeat_interval_ms`` after
  the previous was *sent*: at once when the coordinator held it that long, Kafka's schedule
  when it answered at once (a server that does not hold heartbeats).
* **max_poll_interval_ms**: a reader that has not polled for that long makes the member leave
  (commit, revoke, LeaveGroup for a dynamic member); its next poll joins again.
* **Static membership** (``group_instance_id``): no LeaveGroup on close or poll timeout, so a
  restart within the session timeout keeps the assignment without a rebalance.
* **Commits** name the member's generation; a refused one (UNKNOWN_MEMBER_ID,
  ILLEGAL_GENERATION) ends as :class:`~stratalog.client.errors.CommitFailedError` and the
  member joins again. Auto-commit (every ``auto_commit_interval_ms``) commits only positions of
  records already handed to the reader (:mod:`.consumed_positions`).

Bounded: one FindCoordinator, JoinGroup/SyncGroup, Heartbeat and OffsetFetch in flight at a
time, at most :data:`COMMITS_IN_FLIGHT_MAX` commits; no queues; every timer is a field and
``next_deadline_ms`` is their minimum. Not thread-safe: one task (or thread) drives it.

Crash behaviour: all state is memory. A consumer that dies is removed by the coordinator after
its session timeout and its partitions go to the others, which start at the last committed
offsets: what it handed out since its last commit is read again (at least once). A static
member restarted within its session timeout takes its partitions back without a rebalance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from stratalog.client import errors
from stratalog.client.types import TopicPartition

from .assignment_change import AssignmentChange, after_sync, before_join
from .assignor import RebalanceProtocol, perform_assignment
from .consumed_positions import ConsumedPositions
from .consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from .member_offsets import COMMITS_IN_FLIGHT_MAX, MemberOffsets
from .member_state import (
    COORDINATOR_LOST,
    NO_GENERATION,
    NO_MEMBER_ID,
    InFlight,
    MemberState,
    RequestKind,
)
from .membership_config import MembershipConfig, check_topics
from .membership_messages import (
    Closed,
    Coordinator,
    Failed,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupMetadata,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    NeedPartitionCounts,
    OffsetFetchResponse,
    Output,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    Send,
    SyncGroupRequest,
    SyncGroupResponse,
)

__all__ = ["COMMITS_IN_FLIGHT_MAX", "GroupMembership", "MemberState", "MembershipConfig"]

logger = logging.getLogger(__name__)

class GroupMembership(MemberOffsets):
    """The consumer's group member (module docstring). Event-loop or one thread only.

    Its offsets half (commits, auto-commit, committed start positions) is
    :class:`~.member_offsets.MemberOffsets`."""

    def __init__(self, config: MembershipConfig, now_ms: int) -> None:
        self.config = config
        self._assignors = {a.name: a for a in config.assignors}
        cooperative = all(
            RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in config.assignors
        )
        self.protocol = RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER
        self._topics = frozenset(config.topics)
        self.positions = ConsumedPositions()
        self.state = MemberState.UNJOINED
        self.member_id = NO_MEMBER_ID
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader = False
        self.coordinator: Coordinator | None = None
        self.failure: errors.StratalogError | None = None
        self._epoch = 0                      # bumped each time the coordinator is lost
        self._rejoin_reason: str | None = "the first join"
        self._inflight: dict[int, InFlight] = {}
        self._next_request_id = 0
        # Timers (absolute ms; None: not armed) and their backoff counters.
        self._find_at_ms = now_ms
        self._find_failures = 0
        self._join_at_ms = now_ms
        self._join_failures = 0
        self._next_heartbeat_ms: int | None = None
        self._heartbeat_sent_ms = now_ms
        self._heartbeat_ok_ms = now_ms
        self._last_poll_ms = now_ms
        self._poll_expired = False
        self._next_auto_commit_ms = now_ms + config.auto_commit_interval_ms
        self._fetch_at_ms = now_ms
        self._prepare_deadline_ms = now_ms
        self._prepare_retry_ms: int | None = None
        # A leader's JoinGroup answer waiting for partition counts, and the counts it assigned.
        self._leading: JoinGroupResponse | None = None
        self._partition_counts: dict[str, int] = {}
        self._assigned_counts: dict[str, int] = {}
        self._pending_change: AssignmentChange | None = None   # a sync waiting on its commit
        self._closing = False
        self._closed = False

    # -- Queries -----------------------------------------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """What the member owns (a revoking partition until its revocation is done)."""
        return self.positions.owned

    @property
    def topics(self) -> frozenset[str]:
        return self._topics

    def group_metadata(self) -> GroupMetadata:
        """For ``Producer.send_offsets_to_transaction`` (KIP-447's zombie fencing)."""
        return GroupMetadata(
            self.config.group_id, self.generation, self.member_id, self.config.group_instance_id
        )

    # -- Events from the application and the reader --------------------------------------------

    def tick(self, now_ms: int) -> Output:
        """A timer fired (or the driver just wants what is due)."""
        return self._run(now_ms, lambda out: None)

    def reader_polled(self, now_ms: int) -> Output:
        """The reader asked for records: it is alive (max_poll_interval_ms)."""
        def event(out: Output) -> None:
            self._last_poll_ms = now_ms
            if self._poll_expired:
                self._poll_expired = False
                self._request_rejoin("the reader polled again after max_poll_interval_ms")
        return self._run(now_ms, event)

    def poll_noted(self, now_ms: int) -> bool:
        """The common case of :meth:`reader_polled`, on the hot path (once per batch handed
        over): note the reader is alive, without an Output. True if noted; False when the full
        :meth:`reader_polled` must run (the reader's poll had expired: it rejoins; or the member
        failed or closed). The poll timer, armed for an earlier poll, then fires early, finds
        the reader alive and is armed again: no timer is moved per batch (measured: a full
        reader_polled per batch cost a group Consumer ~10% of its per-batch read CPU)."""
        if self._poll_expired or self.failure is not None or self._closed:
            return False
        self._last_poll_ms = now_ms
        return True

    def handed_out(self, tp: TopicPartition, next_offset: int, leader_epoch: int = -1) -> None:
        """The reader was handed records of ``tp`` up to ``next_offset`` (exclusive). No output:
        called per batch on the hot path; commits happen on the next event."""
        self.positions.handed_out(tp, next_offset, leader_epoch)

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        """Set ``tp``'s position: its ``auto_offset_reset`` start, or the application's seek.

        Raises:
            ValueError: ``tp`` is not assigned to this member, or ``offset`` is negative.
        """
        self.positions.seek(tp, offset, leader_epoch)

    def subscribe(self, now_ms: int, topics: Iterable[str]) -> Output:
        """Change the subscription (a pattern's matches changed): rejoin if it differs."""
        topics = tuple(topics)
        check_topics(topics)
        def event(out: Output) -> None:
            if frozenset(topics) != self._topics:
                self._topics = frozenset(topics)
                self._request_rejoin(f"the subscription changed to {sorted(self._topics)}")
        return self._run(now_ms, event)

    def partition_counts(self, now_ms: int, counts: Mapping[str, int]) -> Output:
        """Partition counts of topics (0: no such topic), asked for by NeedPartitionCounts or
        learnt otherwise; a leader whose assigned topics changed count rejoins."""
        def event(out: Output) -> None:
            self._partition_counts.update(counts)
            if self._leading is not None:
                self._maybe_assign(now_ms, out)
            elif self.leader and self.state is MemberState.STABLE and any(
                self._partition_counts.get(t, 0) != n for t, n in self._assigned_counts.items()
            ):
                self._request_rejoin("the partition count of a subscribed topic changed")
        return self._run(now_ms, event)

    def close(self, now_ms: int) -> Output:
        """Commit (auto-commit on), revoke, leave (dynamic members), then Closed."""
        def event(out: Output) -> None:
            if self._closing or self._closed:
                return
            self._closing = True
            self._start_leaving(now_ms, out, "the consumer is closing")
        return self._run(now_ms, event)

    # -- Events from the driver: the outcome of a Send ------------------------------------------

    def on_response(self, request_id: int, response: object, now_ms: int) -> Output:
        """The answer to the Send ``request_id``."""
        return self._run(now_ms, lambda out: self._outcome(request_id, response, None, now_ms, out))

    def on_error(self, request_id: int, error: errors.StratalogError, now_ms: int) -> Output:
        """The Send ``request_id`` failed with ``error`` (a lost connection or deadline too)."""
        return self._run(now_ms, lambda out: self._outcome(request_id, None, error, now_ms, out))

    # -- The loop -----------------------------------------------------------------------------

    def _run(self, now_ms: int, event) -> Output:
        out = Output()
        if self._closed:
            return out
        if self.failure is not None:
            event(out)  # answer outcomes (CommitDone) even when failed
            return out
        event(out)
        self._step(now_ms, out)
        out.next_deadline_ms = self._deadline()
        return out

    def _step(self, now_ms: int, out: Output) -> None:
        """Do what is due (Kafka's ensureCoordinatorReady + ensureActiveGroup + poll)."""
        if self.failure is not None or self._closed:
            return
        if self._closing:
            return  # the leave sequence is driven by its outcomes only
        self._check_poll_timeout(now_ms, out)
        if self.coordinator is not None and self._in_generation() and self._heartbeating() and (
            now_ms - self._heartbeat_ok_ms > self.config.session_timeout_ms
        ):
            self._coordinator_lost("no heartbeat answered within session_timeout_ms")
        if self.coordinator is None:
            self._maybe_find(now_ms, out)
            return
        if self.state is MemberState.PREPARING and self._prepare_retry_ms is not None and (
            now_ms >= self._prepare_retry_ms
        ):
            self._prepare_retry_ms = None
            self._commit_or_finish_prepare(now_ms, out)
        if (
            self.state in (MemberState.UNJOINED, MemberState.STABLE)
            and self._rejoin_reason is not None
            and not self._poll_expired
            and self._pending_change is None
            and now_ms >= self._join_at_ms
        ):
            self._prepare_join(now_ms, out)
        self._maybe_heartbeat(now_ms, out)
        self._maybe_auto_commit(now_ms, out)
        self._maybe_fetch_offsets(now_ms, out)

    def _deadline(self) -> int | None:
        if self.failure is not None or self._closed or self._closing:
            return None
        due: list[int] = []
        if self.coordinator is None:
            if not self._has_inflight(RequestKind.FIND):
                due.append(self._find_at_ms)
        else:
            joining = self.state is MemberState.UNJOINED or (
                self.state is MemberState.STABLE and self._rejoin_reason is not None
            )
            if joining and not self._poll_expired and self._pending_change is None:
                due.append(self._join_at_ms)
            if self._prepare_retry_ms is not None:
                due.append(self._prepare_retry_ms)
            if self._in_generation() and self._heartbeating():
                if self._next_heartbeat_ms is not None:
                    due.append(self._next_heartbeat_ms)
                due.append(self._heartbeat_ok_ms + self.config.session_timeout_ms + 1)
            if self.config.enable_auto_commit and self.state is MemberState.STABLE:
                due.append(self._next_auto_commit_ms)
            if self.positions.awaiting and not self._has_inflight(RequestKind.FETCH):
                due.append(self._fetch_at_ms)
        if self._in_generation() and not self._poll_expired:
            due.append(self._last_poll_ms + self.config.max_poll_interval_ms + 1)
        return min(due) if due else None

    # -- Coordinator discovery ------------------------------------------------------------------

    def _maybe_find(self, now_ms: int, out: Output) -> None:
        if self._has_inflight(RequestKind.FIND) or now_ms < self._find_at_ms:
            return
        self._send(out, RequestKind.FIND, FindCoordinatorRequest(self.config.group_id), address=None)

    def _coordinator_lost(self, reason: str) -> None:
        """Forget the coordinator (Kafka's markCoordinatorUnknown): requests in flight to it are
        abandoned (their answers are dropped), a join or sync under way starts over."""
        if self.coordinator is None:
            return
        logger.info("group %s: coordinator %s lost: %s", self.config.group_id,
                    self.coordinator.address, reason)
        self.coordinator = None
        self._epoch += 1
        self._next_heartbeat_ms = None
        self._leading = None
        if self.state in (MemberState.JOINING, MemberState.SYNCING, MemberState.PREPARING):
            self._request_rejoin(f"the coordinator was lost while {self.state.value}: {reason}")
            self.state = MemberState.UNJOINED
            self._prepare_retry_ms = None

    # -- Joining --------------------------------------------------------------------------------

    def _request_rejoin(self, reason: str) -> None:
        if self._rejoin_reason is None:
            self._rejoin_reason = reason

    def _membership_lost(self) -> bool:
        return self.generation == NO_GENERATION or self.member_id == NO_MEMBER_ID

    def _reset_generation(self, reason: str, reset_member_id: bool) -> None:
        """Kafka's resetStateAndGeneration: the partitions are lost at the next join."""
        logger.info("group %s: resetting the generation%s: %s", self.config.group_id,
                    " and member id" if reset_member_id else "", reason)
        self.generation = NO_GENERATION
        self.protocol_name = None
        self.leader = False
        if reset_member_id:
            self.member_id = NO_MEMBER_ID
        self.state = MemberState.UNJOINED
        self._next_heartbeat_ms = None
        self._request_rejoin(reason)

    def _prepare_join(self, now_ms: int, out: Output) -> None:
        """Kafka's onJoinPrepare: commit, then revoke or lose, then JoinGroup."""
        self.state = MemberState.PREPARING
        self._prepare_deadline_ms = now_ms + self.config.rebalance_timeout
        self._commit_or_finish_prepare(now_ms, out)

    def _commit_or_finish_prepare(self, now_ms: int, out: Output) -> None:
        if (self.config.enable_auto_commit and not self._membership_lost()
                and now_ms < self._prepare_deadline_ms):
            offsets = self.positions.uncommitted(self.positions.owned)
            if offsets and self._commit_refusal() is None:
                self._send_commit(out, RequestKind.COMMIT_PREPARE, offsets)
                return
        self._finish_prepare(now_ms, out)

    def _finish_prepare(self, now_ms: int, out: Output) -> None:
        prep = before_join(self.positions.owned, self._topics, self.protocol,
                           self._membership_lost())
        if prep.lost:
            out.actions.append(PartitionsLost(prep.lost))
            self.positions.drop(prep.lost)
        if prep.revoked:
            out.actions.append(PartitionsRevoked(prep.revoked))
            self.positions.drop(prep.revoked)
        reason, self._rejoin_reason = self._rejoin_reason or "rejoin", None
        protocols = tuple(
            (assignor.name, encode_subscription(Subscription(
                topics=tuple(sorted(self._topics)),
                user_data=assignor.subscription_user_data(self._topics),
                owned_partitions=tuple(sorted(self.positions.owned)),
                generation_id=self.generation,
            )))
            for assignor in self.config.assignors
        )
        self.state = MemberState.JOINING
        self._send(out, RequestKind.JOIN, JoinGroupRequest(
            group_id=self.config.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.rebalance_timeout,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=protocols,
            reason=reason,
        ))

    def _joined(self, response: JoinGroupResponse, now_ms: int, out: Output) -> None:
        self._join_failures = 0
        if response.protocol_name not in self._assignors:
            self._fail(out, errors.InconsistentGroupProtocolError(
                f"the group chose protocol {response.protocol_name!r}, which this member does "
                f"not offer ({sorted(self._assignors)})"))
            return
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.protocol_name = response.protocol_name
        self.leader = response.leader_id == response.member_id
        self.state = MemberState.SYNCING
        self._heartbeat_ok_ms = now_ms
        # Held heartbeats: one is held from the start of the generation, so that a rebalance
        # starting right after this one (a cooperative second round) is learnt of at once.
        self._next_heartbeat_ms = now_ms + (
            0 if self.config.held_heartbeats else self.config.heartbeat_interval_ms)
        if self.leader and not response.skip_assignment:
            self._leading = response
            self._maybe_assign(now_ms, out)
        else:
            self._send_sync(out, ())

    def _maybe_assign(self, now_ms: int, out: Output) -> None:
        """The leader's step, once it has the partition counts of every subscribed topic."""
        response = self._leading
        assert response is not None
        try:
            topics = {t for m in response.members for t in decode_subscription(m.metadata).topics}
        except ConsumerProtocolError as error:
            self._leading = None
            self._fail(out, error)
            return
        missing = frozenset(topics - set(self._partition_counts))
        if missing:
            out.actions.append(NeedPartitionCounts(missing))
            return
        self._leading = None
        counts = {t: self._partition_counts[t] for t in topics}
        assignor = self._assignors[self.protocol_name or ""]
        try:
            assignments = perform_assignment(assignor, counts, response.members, self.protocol)
        except (ConsumerProtocolError, ValueError) as error:
            self._fail(out, error if isinstance(error, errors.StratalogError) else
                       errors.StratalogError(f"the leader's assignment failed: {error}"))
            return
        self._assigned_counts = counts
        self._send_sync(out, tuple(sorted(assignments.items())))

    def _send_sync(self, out: Output, assignments: tuple[tuple[str, bytes], ...]) -> None:
        self._send(out, RequestKind.SYNC, SyncGroupRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol_name or "",
            assignments=assignments,
        ))

    def _synced(self, response: SyncGroupResponse, now_ms: int, out: Output) -> None:
        """Kafka's onJoinComplete: apply the assignment; commit and revoke what moved away."""
        try:
            assignment = decode_assignment(response.assignment)
        except ConsumerProtocolError as error:
            self._fail(out, error)
            return
        self._assignors[self.protocol_name or ""].on_assignment(assignment, self.generation)
        self.state = MemberState.STABLE
        self._join_failures = 0
        change = after_sync(self.positions.owned, assignment.partitions, self._topics,
                            self.protocol)
        if not change.applies:
            self._request_rejoin(change.rejoin_reason or "the assignment does not apply")
            return
        if change.revoked:
            self.positions.start_revoking(change.revoked)
            offsets = self.positions.uncommitted(change.revoked)
            if self.config.enable_auto_commit and offsets:
                self._pending_change = change
                self._send_commit(out, RequestKind.COMMIT_REVOKE, offsets)
                return
        self._apply_change(change, now_ms, out)

    def _apply_change(self, change: AssignmentChange, now_ms: int, out: Output) -> None:
        self._pending_change = None
        if change.revoked:
            out.actions.append(PartitionsRevoked(change.revoked))
            self.positions.drop(change.revoked)
        added = self.positions.assign(change.added)
        out.actions.append(PartitionsAssigned(frozenset(added), self.positions.owned))
        self._fetch_at_ms = now_ms
        if change.rejoin_reason is not None:
            self._request_rejoin(change.rejoin_reason)

    # -- Heartbeats, poll timeout, leaving --------------------------------------------------------

    def _in_generation(self) -> bool:
        return self.generation != NO_GENERATION and self.member_id != NO_MEMBER_ID

    def _heartbeating(self) -> bool:
        # Kafka heartbeats in COMPLETING_REBALANCE and STABLE (and while preparing, which it
        # does in STABLE), not while a JoinGroup is in flight.
        return self.state in (MemberState.SYNCING, MemberState.STABLE, MemberState.PREPARING)

    def _maybe_heartbeat(self, now_ms: int, out: Output) -> None:
        if (not self._in_generation() or not self._heartbeating()
                or self._next_heartbeat_ms is None or now_ms < self._next_heartbeat_ms
                or self._has_inflight(RequestKind.HEARTBEAT)):
            return
        self._next_heartbeat_ms = None  # rearmed by the answer
        self._heartbeat_sent_ms = now_ms
        max_wait_ms = self.config.heartbeat_interval_ms if self.config.held_heartbeats else 0
        self._send(out, RequestKind.HEARTBEAT, HeartbeatRequest(
            self.config.group_id, self.generation, self.member_id, self.config.group_instance_id,
            max_wait_ms))

    def _heartbeat_outcome(self, error: errors.StratalogError | None, now_ms: int,
                           out: Output) -> None:
        self._next_heartbeat_ms = now_ms + self.config.heartbeat_interval_ms
        if error is None:
            self._heartbeat_ok_ms = now_ms
            if self.config.held_heartbeats:
                # Held for its whole wait: the next at once (one is always held). Answered
                # early (a server that does not hold them): the interval after the send, so
                # such a server sees Kafka's schedule, never a busy loop.
                self._next_heartbeat_ms = max(
                    now_ms, self._heartbeat_sent_ms + self.config.heartbeat_interval_ms)
        elif isinstance(error, errors.RebalanceInProgressError):
            self._heartbeat_ok_ms = now_ms
            if self.state is MemberState.STABLE:
                self._request_rejoin("the group is rebalancing (heartbeat)")
        elif not self._group_error(error, "Heartbeat", out):
            # Other retriable errors: try again at the next interval, as Kafka's.
            self._next_heartbeat_ms = now_ms + self._backoff_ms(1)

    def _check_poll_timeout(self, now_ms: int, out: Output) -> None:
        if (self._poll_expired or not self._in_generation()
                or now_ms - self._last_poll_ms <= self.config.max_poll_interval_ms):
            return
        logger.warning(
            "group %s: the reader did not poll within max_poll_interval_ms=%d: leaving the group",
            self.config.group_id, self.config.max_poll_interval_ms)
        self._poll_expired = True
        self._start_leaving(now_ms, out, "the reader did not poll within max_poll_interval_ms")

    def _start_leaving(self, now_ms: int, out: Output, reason: str) -> None:
        """Commit what was handed out, then revoke (or lose) and leave (Kafka's
        maybeLeaveGroup/onLeavePrepare); ends in Closed when closing."""
        self._leave_reason = reason
        if (self.config.enable_auto_commit and not self._membership_lost()
                and self.coordinator is not None and self._commit_refusal() is None):
            offsets = self.positions.uncommitted(self.positions.owned)
            if offsets:
                self._send_commit(out, RequestKind.COMMIT_LEAVE, offsets)
                return
        self._finish_leaving(now_ms, out)

    def _finish_leaving(self, now_ms: int, out: Output) -> None:
        owned = self.positions.owned
        if owned:
            out.actions.append(PartitionsLost(owned) if self._membership_lost()
                               else PartitionsRevoked(owned))
            self.positions.drop(owned)
        dynamic = self.config.group_instance_id is None
        leaving = dynamic and self.member_id and self.coordinator is not None and (
            self.state is not MemberState.UNJOINED or self.generation != NO_GENERATION
        )
        if leaving:
            self._send(out, RequestKind.LEAVE, LeaveGroupRequest(
                self.config.group_id, (LeavingMember(self.member_id, None, self._leave_reason),)))
        if self.coordinator is not None:
            # Answers to a JoinGroup or SyncGroup still in flight are now stale: the member
            # left (Kafka's resetGenerationOnLeaveGroup), so none may put it back in a generation.
            self._epoch += 1
        self._reset_generation(self._leave_reason, reset_member_id=True)
        self._pending_change = None
        self._leading = None
        if self._closing and not leaving:  # else Closed when the LeaveGroup is answered
            self._closed = True
            out.actions.append(Closed())

    # -- Outcomes -----------------------------------------------------------------------------------

    def _outcome(self, request_id: int, response: object, error: errors.StratalogError | None,
                 now_ms: int, out: Output) -> None:
        pending = self._inflight.pop(request_id, None)
        if pending is None:
            raise ValueError(f"request {request_id} is not in flight (answered twice?)")
        if pending.kind.name.startswith("COMMIT"):
            self._commit_outcome(pending, error, now_ms, out)
            return
        if pending.kind is RequestKind.LEAVE:
            if self._closing and not self._closed:
                self._closed = True
                out.actions.append(Closed())
            return
        if pending.epoch != self._epoch or self.failure is not None or self._closing:
            return  # sent to a coordinator since lost, or before the member left: dropped
        if self._poll_expired and pending.kind in (RequestKind.JOIN, RequestKind.SYNC):
            return  # the member is leaving: no generation of it may begin
        if pending.kind is RequestKind.HEARTBEAT and pending.generation != self.generation:
            # An answer about a past generation (Kafka's generationUnchanged check). A held one
            # kept the new generation's first heartbeat back: send that at once.
            if not self._has_inflight(RequestKind.HEARTBEAT):
                self._next_heartbeat_ms = now_ms + (
                    0 if self.config.held_heartbeats else self.config.heartbeat_interval_ms)
                self._maybe_heartbeat(now_ms, out)
            return
        if pending.kind is RequestKind.FIND:
            self._find_outcome(response, error, now_ms, out)
        elif pending.kind is RequestKind.HEARTBEAT:
            self._heartbeat_outcome(error, now_ms, out)
        elif pending.kind is RequestKind.JOIN:
            if error is None:
                assert isinstance(response, JoinGroupResponse), response
                self._joined(response, now_ms, out)
            else:
                self._join_error(error, now_ms, out, "JoinGroup")
        elif pending.kind is RequestKind.SYNC:
            if error is None:
                assert isinstance(response, SyncGroupResponse), response
                self._synced(response, now_ms, out)
            else:
                self._join_error(error, now_ms, out, "SyncGroup")
        elif pending.kind is RequestKind.FETCH:
            if error is None:
                assert isinstance(response, OffsetFetchResponse), response
                self._fetched(pending, response, out)
            elif not self._group_error(error, "OffsetFetch", out):
                self._fetch_at_ms = now_ms + self._backoff_ms(1)

    def _find_outcome(self, response: object, error: errors.StratalogError | None,
                      now_ms: int, out: Output) -> None:
        if error is None and isinstance(response, FindCoordinatorResponse) and not response.address:
            error = errors.CoordinatorNotAvailableError(
                f"FindCoordinator answered no address for group {self.config.group_id!r}")
        if error is None:
            assert isinstance(response, FindCoordinatorResponse), response
            self.coordinator = Coordinator(response.node_id, response.address)
            self._find_failures = 0
            self._heartbeat_ok_ms = now_ms
            if self._in_generation() and self._heartbeating():
                self._next_heartbeat_ms = now_ms
        elif error.retriable:
            self._find_failures += 1
            self._find_at_ms = now_ms + self._backoff_ms(self._find_failures)
        else:
            self._fail(out, error)

    def _join_error(self, error: errors.StratalogError, now_ms: int, out: Output,
                    api: str) -> None:
        """A failed JoinGroup or SyncGroup (Kafka's JoinGroupResponseHandler and
        SyncGroupResponseHandler)."""
        self.state = MemberState.UNJOINED
        self._leading = None
        self._request_rejoin(f"{api} failed: {error}")
        if isinstance(error, errors.MemberIdRequiredError):
            if not error.member_id:
                self._fail(out, errors.StratalogError(
                    f"MEMBER_ID_REQUIRED without a member id: {error}"))
                return
            self.member_id = error.member_id
            self._join_at_ms = now_ms
        elif isinstance(error, errors.RebalanceInProgressError) or self._group_error(error, api, out):
            self._join_at_ms = now_ms
        else:
            self._join_failures += 1
            self._join_at_ms = now_ms + self._backoff_ms(self._join_failures)

    def _group_error(self, error: errors.StratalogError, api: str, out: Output) -> bool:
        """The rules shared by every group request; True when handled (the caller retries at
        once), False for a retriable error to retry after a backoff. Fails the member for a
        non-retriable error with no rule."""
        if isinstance(error, errors.UnknownMemberIdError):
            self._reset_generation(f"UNKNOWN_MEMBER_ID from {api}", reset_member_id=True)
        elif isinstance(error, errors.IllegalGenerationError):
            self._reset_generation(f"ILLEGAL_GENERATION from {api}", reset_member_id=False)
        elif isinstance(error, COORDINATOR_LOST):
            self._coordinator_lost(f"{api}: {error}")
        elif error.retriable:
            return False
        else:
            self._fail(out, error)
        return True

    def _fail(self, out: Output, error: errors.StratalogError) -> None:
        if self.failure is not None:
            return
        logger.error("group %s: the member stops: %s", self.config.group_id, error)
        self.failure = error
        out.actions.append(Failed(error))

    # -- Sending ----------------------------------------------------------------------------------

    def _send(self, out: Output, kind: RequestKind, request: object,
              address: str | bool | None = True) -> InFlight:
        if address is True:
            assert self.coordinator is not None, kind
            address = self.coordinator.address
        self._next_request_id += 1
        pending = InFlight(kind, self._epoch, self.generation)
        self._inflight[self._next_request_id] = pending
        out.actions.append(Send(self._next_request_id, request, address or None))
        return pending

    def _has_inflight(self, kind: RequestKind) -> bool:
        return any(p.kind is kind and p.epoch == self._epoch for p in self._inflight.values())

    def _backoff_ms(self, failures: int) -> int:
        """Exponential: retry_backoff_ms doubled per failure, up to retry_backoff_max_ms."""
        exponent = min(max(failures - 1, 0), 30)
        return min(self.config.retry_backoff_ms << exponent, self.config.retry_backoff_max_ms)
