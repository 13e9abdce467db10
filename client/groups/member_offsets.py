"""The offsets half of the group member: commits, auto-commit, committed start positions.

Kafka's ConsumerCoordinator's offset parts
(``clients/src/main/java/org/apache/kafka/clients/consumer/internals/ConsumerCoordinator.java``:
``commitOffsetsAsync``/``Sync``, ``maybeAutoCommitOffsetsAsync``, ``OffsetCommitResponseHandler``,
``fetchCommittedOffsets``), as a mixin of :class:`~.group_membership.GroupMembership`: it works
on the member's state (generation, member id, coordinator, in-flight requests) and is not
usable alone. The positions themselves are kept by :mod:`.consumed_positions`.

Rules:

* A commit names the member's generation and member id. It is refused at once, without a
  request, when the member is in no generation (CommitFailedError), completing a rebalance
  (REBALANCE_IN_PROGRESS), without a coordinator (COORDINATOR_NOT_AVAILABLE) or with
  :data:`COMMITS_IN_FLIGHT_MAX` commits in flight (RESOURCE_LIMIT_EXCEEDED, retriable).
* UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION for the current generation make the member lose its
  partitions and rejoin; the commit ends as CommitFailedError (``cause``: the server's error).
  For a past generation they only end the commit so.
* Auto-commit, every ``auto_commit_interval_ms`` while Stable, commits the positions of records
  handed to the reader that differ from what this member last committed (nothing when nothing
  moved); a retriable failure is tried again after the backoff.
* Newly assigned partitions are looked up with one OffsetFetch at a time; a partition without
  a committed offset starts at ``auto_offset_reset`` (the driver seeks it), or, with "none",
  is reported in a NoOffsetForPartitionError.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from stratalog.client import errors
from stratalog.client.types import TopicPartition

from .member_state import COORDINATOR_LOST, InFlight, MemberState, RequestKind
from .membership_messages import (
    CommitDone,
    CommittedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Output,
    StartPositions,
)

__all__ = ["COMMITS_IN_FLIGHT_MAX", "MemberOffsets"]

logger = logging.getLogger(__name__)

#: Commits (the application's and the member's own) in flight at once; more are refused with a
#: retriable ResourceLimitExceededError instead of queued.
COMMITS_IN_FLIGHT_MAX = 64


class MemberOffsets:
    """The offsets half of GroupMembership (module docstring); a mixin, not usable alone."""

    def commit(
        self, now_ms: int, offsets: Mapping[TopicPartition, int] | None = None,
        token: object = None, metadata: str = "",
    ) -> Output:
        """Commit ``offsets`` (default: the positions of every owned partition); ends with a
        CommitDone(token) in this Output or a later one."""
        def event(out: Output) -> None:
            if offsets is None:
                chosen = {tp: pos for tp, pos in self.positions.positions().items()
                          if tp not in self.positions.revoking}
            else:
                chosen = {tp: (offset, -1) for tp, offset in offsets.items()}
                bad = sorted(tp for tp, offset in offsets.items() if offset < 0)
                if bad:
                    raise ValueError(f"offsets to commit must be >= 0: {bad}")
            refusal = self._commit_refusal()
            if refusal is not None or not chosen:
                out.actions.append(CommitDone(token, {tp: o for tp, (o, _) in chosen.items()},
                                              refusal))
                return
            self._send_commit(out, RequestKind.COMMIT_USER, chosen, token, metadata)
        return self._run(now_ms, event)

    def _maybe_auto_commit(self, now_ms: int, out: Output) -> None:
        if (not self.config.enable_auto_commit or self.state is not MemberState.STABLE
                or now_ms < self._next_auto_commit_ms or self._has_inflight(RequestKind.COMMIT_AUTO)):
            return
        self._next_auto_commit_ms = now_ms + self.config.auto_commit_interval_ms
        offsets = self.positions.uncommitted(self.positions.owned - self.positions.revoking)
        if offsets and self._commit_refusal() is None:
            self._send_commit(out, RequestKind.COMMIT_AUTO, offsets)

    def _commit_refusal(self) -> errors.StratalogError | None:
        """Why a commit cannot be sent now, or None (Kafka's sendOffsetCommitRequest checks)."""
        if self.failure is not None:
            return self.failure
        if not self._in_generation():
            return errors.CommitFailedError(
                f"the member is not in a generation of group {self.config.group_id!r} (it left, "
                f"was removed, or has not joined yet): its partitions may be another's now")
        if self.state is MemberState.SYNCING:
            return errors.RebalanceInProgressError(
                f"group {self.config.group_id!r} is completing a rebalance: commit after it")
        if self.coordinator is None:
            return errors.CoordinatorNotAvailableError(
                f"the coordinator of group {self.config.group_id!r} is not known yet")
        if sum(p.kind.name.startswith("COMMIT") for p in self._inflight.values()) >= (
            COMMITS_IN_FLIGHT_MAX
        ):
            return errors.ResourceLimitExceededError(
                f"{COMMITS_IN_FLIGHT_MAX} commits in flight already", metadata={
                    "limit": "COMMITS_IN_FLIGHT_MAX"})
        return None

    def _send_commit(
        self, out: Output, kind: RequestKind, offsets: Mapping[TopicPartition, tuple[int, int]],
        token: object = None, metadata: str = "",
    ) -> None:
        request = OffsetCommitRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            offsets=tuple(CommittedOffset(tp.topic, tp.partition, offset, epoch, metadata)
                          for tp, (offset, epoch) in sorted(offsets.items())),
        )
        pending = self._send(out, kind, request)
        pending.generation = self.generation
        pending.offsets = {tp: offset for tp, (offset, _) in offsets.items()}
        pending.token = token

    def _commit_outcome(self, pending: InFlight, error: errors.StratalogError | None,
                        now_ms: int, out: Output) -> None:
        if error is None:
            self.positions.committed(pending.offsets)
        elif pending.generation == self.generation:
            # Kafka's OffsetCommitResponseHandler: a refusal of the current generation.
            if isinstance(error, (errors.UnknownMemberIdError, errors.IllegalGenerationError)):
                self._group_error(error, "OffsetCommit", out)
                error = errors.CommitFailedError(
                    f"group {self.config.group_id!r} refused the commit of generation "
                    f"{pending.generation}: {error}; the member joins again", cause=error)
            elif isinstance(error, errors.RebalanceInProgressError):
                self._request_rejoin("the group is rebalancing (commit)")
            elif isinstance(error, COORDINATOR_LOST):
                self._coordinator_lost(f"OffsetCommit: {error}")
            elif isinstance(error, errors.FencedInstanceIdError):
                self._fail(out, error)
            # Any other error (NOT_AUTHORIZED on a topic, OFFSET_METADATA_TOO_LARGE, ...) fails
            # this commit only, as Kafka's: the membership is not in question.
        elif isinstance(error, (errors.UnknownMemberIdError, errors.IllegalGenerationError)):
            error = errors.CommitFailedError(
                f"the commit of generation {pending.generation} was refused: {error}", cause=error)
        if error is not None and pending.kind is not RequestKind.COMMIT_USER:
            logger.warning("group %s: %s failed: %s", self.config.group_id, pending.kind.value,
                           error)
        kind = pending.kind
        leaving = self._closing or self._poll_expired
        if kind is RequestKind.COMMIT_USER:
            out.actions.append(CommitDone(pending.token, pending.offsets, error))
        elif kind is RequestKind.COMMIT_AUTO and error is not None and error.retriable:
            self._next_auto_commit_ms = now_ms + self._backoff_ms(1)
        elif kind is RequestKind.COMMIT_PREPARE and self.state is MemberState.PREPARING and (
            not leaving  # the leave sequence took over: it commits, revokes and leaves
        ):
            if error is not None and error.retriable and self.coordinator is not None:
                self._prepare_retry_ms = now_ms + self._backoff_ms(1)
            elif self.coordinator is not None:
                self._finish_prepare(now_ms, out)
        elif kind is RequestKind.COMMIT_REVOKE and self._pending_change is not None and (
            not leaving
        ):
            self._apply_change(self._pending_change, now_ms, out)
        elif kind is RequestKind.COMMIT_LEAVE and leaving:
            self._finish_leaving(now_ms, out)

    def _maybe_fetch_offsets(self, now_ms: int, out: Output) -> None:
        # In any state, as Kafka's consumer: a partition assigned just before a follow-up
        # rebalance starts reading while that rebalance runs.
        if (not self.positions.awaiting or now_ms < self._fetch_at_ms
                or self._has_inflight(RequestKind.FETCH)):
            return
        partitions = tuple(sorted(self.positions.awaiting))
        pending = self._send(out, RequestKind.FETCH, OffsetFetchRequest(
            self.config.group_id, partitions, self.config.require_stable_offsets))
        pending.partitions = partitions

    def _fetched(self, pending: InFlight, response: OffsetFetchResponse, out: Output) -> None:
        found = {TopicPartition(o.topic, o.partition): o for o in response.offsets}
        committed: dict[TopicPartition, tuple[int, int]] = {}
        reset: dict[TopicPartition, str] = {}
        for tp in pending.partitions:
            if tp not in self.positions.awaiting:
                continue  # revoked, lost or sought meanwhile
            entry = found.get(tp)
            if entry is not None and entry.offset >= 0:
                committed[tp] = (entry.offset, entry.leader_epoch)
                self.positions.start_at_committed(tp, entry.offset, entry.leader_epoch)
            else:
                reset[tp] = self.config.auto_offset_reset
                self.positions.fetched_none(tp)
        if not committed and not reset:
            return
        missing = sorted(tp for tp, policy in reset.items() if policy == "none")
        error = None
        if missing:
            error = errors.NoOffsetForPartitionError(
                f"no committed offset for {[f'{t}-{p}' for t, p in missing]} in group "
                f"{self.config.group_id!r} and auto_offset_reset is 'none'",
                partitions=tuple(missing))
        out.actions.append(StartPositions(committed, reset, error))
