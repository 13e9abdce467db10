"""A message pump between group members (client/groups) and the server's group coordinator.

Both sides are sans-IO cores of ours: :class:`~stratalog.client.groups.GroupMembership` (the
consumer's member) and :class:`~stratalog.server.groups.GroupCoordinator` (one
``__consumer_offsets`` partition's coordinator). The pump is what the gRPC front end and the
Consumer's driver will be, minus the sockets: it translates the member's request dataclasses to
the coordinator's, carries out the coordinator's appends (into a list standing for the
partition) and replies, translates the replies back (an error as the client's exception class,
as ``errors.from_rpc_error`` would make it), and keeps virtual time: nothing sleeps.

Each member has a simulated reader: every ``READ_EVERY_MS`` it is handed ``READ_BATCH`` records
of each partition it has a position for, then polls. A *stopped* member neither reads, ticks
nor sends: as a process that was killed (its session times out on the coordinator).
"""

from __future__ import annotations

import collections
import dataclasses

from stratalog.client import errors
from stratalog.client.groups import membership_messages as m
from stratalog.client.groups.group_membership import GroupMembership, MembershipConfig
from stratalog.client.types import TopicPartition
from stratalog.server import groups as s
from stratalog.server.groups.group_records import OffsetCommitRecord

READ_EVERY_MS = 100
READ_BATCH = 10
COORDINATOR_ADDRESS = "127.0.0.1:9092"


def client_error(error: s.GroupError, member_id: str = "") -> errors.StratalogError:
    """The exception a member gets for the coordinator's ``error`` (the gRPC front end sends
    the error's reason and, for MEMBER_ID_REQUIRED, the ErrorInfo metadata "member_id")."""
    cls = errors.ERRORS_BY_REASON.get(error.kafka_name)
    metadata = {"member_id": member_id} if error.kafka_name == "MEMBER_ID_REQUIRED" else {}
    if cls is None:
        return errors.StratalogError(str(error), reason=error.kafka_name, metadata=metadata)
    return cls(str(error), metadata=metadata)


@dataclasses.dataclass
class MemberLog:
    """What one member's actions said, for the assertions."""

    assigned: list[frozenset[TopicPartition]] = dataclasses.field(default_factory=list)
    revoked: list[frozenset[TopicPartition]] = dataclasses.field(default_factory=list)
    lost: list[frozenset[TopicPartition]] = dataclasses.field(default_factory=list)
    commits: list[m.CommitDone] = dataclasses.field(default_factory=list)
    failures: list[errors.StratalogError] = dataclasses.field(default_factory=list)
    closed: bool = False


class GroupPump:
    """Several members, one coordinator, virtual time (module docstring)."""

    def __init__(self, group_config: s.GroupConfig, partitions: dict[str, int], now_ms: int = 0):
        self.now = now_ms
        self.coordinator = s.GroupCoordinator(group_config, now_ms=now_ms)
        self.partitions = partitions
        self.log: list[object] = []      # stands for the __consumer_offsets partition
        self.members: dict[str, GroupMembership] = {}
        self.logs: dict[str, MemberLog] = {}
        self.deadlines: dict[str, int | None] = {}
        self.stopped: set[str] = set()
        self.coordinator_deadline: int | None = None
        self.next_read = now_ms
        self._replies: collections.deque = collections.deque()
        self._requests: dict[tuple[str, int], object] = {}

    # -- Members --------------------------------------------------------------------------------

    def add(self, name: str, config: MembershipConfig) -> GroupMembership:
        member = GroupMembership(config, self.now)
        self.members[name] = member
        self.logs[name] = MemberLog()
        self.carry_out(name, member.tick(self.now))
        return member

    def stop(self, name: str) -> None:
        """The member's process dies: nothing of it runs any more."""
        self.stopped.add(name)

    def carry_out(self, name: str, out: m.Output) -> None:
        """Do what a member's Output asks, in order (as the Consumer's driver will)."""
        member, log = self.members[name], self.logs[name]
        for action in out.actions:
            if name in self.stopped:
                return
            if isinstance(action, m.Send):
                self._send(name, action)
            elif isinstance(action, m.PartitionsAssigned):
                log.assigned.append(action.added)
            elif isinstance(action, m.PartitionsRevoked):
                log.revoked.append(action.partitions)
            elif isinstance(action, m.PartitionsLost):
                log.lost.append(action.partitions)
            elif isinstance(action, m.StartPositions):
                for tp in action.reset:
                    member.seek(tp, 0)  # "earliest": ListOffsets would say 0 here
            elif isinstance(action, m.NeedPartitionCounts):
                counts = {t: self.partitions.get(t, 0) for t in action.topics}
                self.carry_out(name, member.partition_counts(self.now, counts))
            elif isinstance(action, m.CommitDone):
                log.commits.append(action)
            elif isinstance(action, m.Failed):
                log.failures.append(action.error)
            elif isinstance(action, m.Closed):
                log.closed = True
        self.deadlines[name] = out.next_deadline_ms
        self._deliver()

    # -- The coordinator's side -----------------------------------------------------------------

    def _send(self, name: str, send: m.Send) -> None:
        request, token = send.request, (name, send.request_id)
        if isinstance(request, m.FindCoordinatorRequest):
            self._replies.append((token, m.FindCoordinatorResponse(0, COORDINATOR_ADDRESS), None))
            return
        assert send.address == COORDINATOR_ADDRESS, send
        self._requests[token] = request
        c, now = self.coordinator, self.now
        if isinstance(request, m.JoinGroupRequest):
            out = c.join_group(s.JoinGroupRequest(
                request.group_id, request.protocol_type, request.protocols,
                request.session_timeout_ms, request.rebalance_timeout_ms, request.member_id,
                request.group_instance_id, client_id=name, reason=request.reason), token, now)
        elif isinstance(request, m.SyncGroupRequest):
            out = c.sync_group(s.SyncGroupRequest(
                request.group_id, request.member_id, request.generation_id,
                request.group_instance_id, request.protocol_type, request.protocol_name,
                request.assignments), token, now)
        elif isinstance(request, m.HeartbeatRequest):
            out = c.heartbeat(s.HeartbeatRequest(
                request.group_id, request.member_id, request.generation_id,
                request.group_instance_id, request.max_wait_ms), token, now)
        elif isinstance(request, m.LeaveGroupRequest):
            out = c.leave_group(s.LeaveGroupRequest(request.group_id, tuple(
                s.LeavingMember(x.member_id, x.group_instance_id, x.reason)
                for x in request.members)), token, now)
        elif isinstance(request, m.OffsetCommitRequest):
            out = c.commit_offsets(s.OffsetCommitRequest(
                request.group_id,
                tuple(s.PartitionOffset(o.topic, o.partition, o.offset, o.leader_epoch,
                                        o.metadata) for o in request.offsets),
                request.member_id, request.generation_id, request.group_instance_id),
                token, now)
        elif isinstance(request, m.OffsetFetchRequest):
            out = c.fetch_offsets(s.OffsetFetchRequest(
                request.group_id, tuple((tp.topic, tp.partition) for tp in request.partitions),
                request.require_stable), token, now)
        else:
            raise AssertionError(f"unexpected request {request!r}")
        self._coordinator_output(out)

    def _coordinator_output(self, out: s.Output) -> None:
        for append in out.appends:
            first = len(self.log)
            self.log.extend(append.records)
            self._coordinator_output(self.coordinator.append_completed(
                append.append_id, first, self.now))
        for reply in out.replies:
            request = self._requests.pop(reply.reply_to)
            self._replies.append((reply.reply_to, *self._translate(request, reply.response)))
        self.coordinator_deadline = self.coordinator.next_deadline_ms()

    @staticmethod
    def _translate(request: object, r: object) -> tuple[object, errors.StratalogError | None]:
        """The coordinator's response as the member gets it: a response, or an error."""
        if isinstance(r, s.JoinGroupResponse):
            if r.error is not None:
                return None, client_error(r.error, r.member_id)
            return m.JoinGroupResponse(
                r.generation_id, r.protocol_type or "", r.protocol_name or "", r.leader_id,
                r.member_id, r.skip_assignment,
                tuple(m.JoinedMember(x.member_id, x.metadata, x.group_instance_id)
                      for x in r.members)), None
        if isinstance(r, s.SyncGroupResponse):
            if r.error is not None:
                return None, client_error(r.error)
            return m.SyncGroupResponse(r.protocol_type or "", r.protocol_name or "",
                                       r.assignment), None
        if isinstance(r, s.HeartbeatResponse):
            return (m.HeartbeatResponse(), None) if r.error is None else (
                None, client_error(r.error))
        if isinstance(r, s.LeaveGroupResponse):
            if r.error is not None:
                return None, client_error(r.error)
            return m.LeaveGroupResponse(tuple(
                m.LeftMember(x.member_id, x.group_instance_id,
                             None if x.error is None else client_error(x.error))
                for x in r.members)), None
        if isinstance(r, s.OffsetCommitResponse):
            failed = [p.error for p in r.partitions if p.error is not None]
            return (m.OffsetCommitResponse(), None) if not failed else (
                None, client_error(failed[0]))
        if isinstance(r, s.OffsetFetchResponse):
            if r.error is not None:
                return None, client_error(r.error)
            failed = [p.error for p in r.partitions if p.error is not None]
            if failed:
                return None, client_error(failed[0])
            return m.OffsetFetchResponse(tuple(
                m.CommittedOffset(p.topic, p.partition, p.offset, p.leader_epoch, p.metadata)
                for p in r.partitions)), None
        raise AssertionError(f"unexpected response {r!r} to {request!r}")

    def _deliver(self) -> None:
        while self._replies:
            (name, request_id), response, error = self._replies.popleft()
            if name in self.stopped:
                continue
            member = self.members[name]
            if error is None:
                out = member.on_response(request_id, response, self.now)
            else:
                out = member.on_error(request_id, error, self.now)
            self.carry_out(name, out)

    # -- Time -----------------------------------------------------------------------------------

    def run_until(self, end_ms: int, reading: bool = True) -> None:
        """Advance virtual time to ``end_ms``, firing every timer on the way, in time order."""
        assert end_ms >= self.now
        for _ in range(1_000_000):
            alive = [n for n in self.members if n not in self.stopped]
            times = [d for n in alive if (d := self.deadlines.get(n)) is not None]
            if self.coordinator_deadline is not None:
                times.append(self.coordinator_deadline)
            if reading:
                times.append(self.next_read)
            nxt = max(min(times, default=end_ms), self.now)
            if nxt > end_ms:
                self.now = end_ms
                return
            self.now = nxt
            if self.coordinator_deadline is not None and self.coordinator_deadline <= nxt:
                self._coordinator_output(self.coordinator.poll(nxt))
                self._deliver()
            if reading and self.next_read <= nxt:
                self.next_read = nxt + READ_EVERY_MS
                for name in alive:
                    self._read(name)
            for name in alive:
                deadline = self.deadlines.get(name)
                if name not in self.stopped and deadline is not None and deadline <= nxt:
                    self.carry_out(name, self.members[name].tick(nxt))
            if nxt == end_ms and not self._due(nxt):
                return
        raise AssertionError("the pump did not reach its end time in 1,000,000 steps")

    def _due(self, now: int) -> bool:
        due = [d for n, d in self.deadlines.items() if n not in self.stopped and d is not None]
        if self.coordinator_deadline is not None:
            due.append(self.coordinator_deadline)
        return any(d <= now for d in due)

    def _read(self, name: str) -> None:
        member = self.members[name]
        for tp, (offset, _) in member.positions.positions().items():
            member.handed_out(tp, offset + READ_BATCH)
        self.carry_out(name, member.reader_polled(self.now))

    # -- Views for the assertions ---------------------------------------------------------------

    def commits(self) -> list[OffsetCommitRecord]:
        return [r for r in self.log if isinstance(r, OffsetCommitRecord)]

    def owners(self) -> dict[TopicPartition, list[str]]:
        owners: dict[TopicPartition, list[str]] = collections.defaultdict(list)
        for name, member in self.members.items():
            if name not in self.stopped:
                for tp in member.assignment:
                    owners[tp].append(name)
        return owners
