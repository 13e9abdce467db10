"""The group coordinator's settings, each with Kafka's name and default (docs/groups.md).

Units are last in the names; every bound the coordinator enforces is one of these.
"""

from __future__ import annotations

from dataclasses import dataclass

from .group_errors import GroupError, InvalidGroupIdError

__all__ = ["GroupConfig"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Settings of :class:`~.group_coordinator.GroupCoordinator`.

    ``group_max_size``: group.max.size (Kafka: Integer.MAX_VALUE; ours a finite bound).
    ``initial_rebalance_delay_ms``: group.initial.rebalance.delay.ms: how long the first
    rebalance of an Empty group waits for more members, extended by each join up to the
    rebalance timeout.
    ``new_member_join_timeout_ms``: how long a new member's parked JoinGroup may wait before it
    is dropped (Kafka's group.classic.new.member.join.timeout.ms, fixed at 5 minutes).
    ``min_session_timeout_ms`` / ``max_session_timeout_ms``: group.min/max.session.timeout.ms.
    ``offsets_retention_ms``: offsets.retention.minutes in ms: an Empty group's offsets expire
    this long after it became Empty (a simple group's, this long after their commit).
    ``offsets_retention_check_interval_ms``: offsets.retention.check.interval.ms.
    ``offset_metadata_max_bytes``: offset.metadata.max.bytes (the commit's metadata string).
    ``group_id_max_length``: ours (Kafka bounds it only by the wire's int16 string length).
    """

    group_max_size: int = 1_000
    initial_rebalance_delay_ms: int = 3_000
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 30 * 60 * 1000
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 10 * 60 * 1000
    offset_metadata_max_bytes: int = 4096
    group_id_max_length: int = 255

    def __post_init__(self) -> None:
        assert self.group_max_size >= 1, self
        assert self.initial_rebalance_delay_ms >= 0, self
        assert 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms, self
        assert self.offsets_retention_ms > 0 and self.offsets_retention_check_interval_ms > 0, self

    def group_id_error(self, group_id: str) -> GroupError | None:
        """INVALID_GROUP_ID for an empty group id or one over ``group_id_max_length``, else None."""
        if not group_id or len(group_id) > self.group_id_max_length:
            return InvalidGroupIdError(
                f"group id of {len(group_id)} characters: it must have 1 to "
                f"{self.group_id_max_length}"
            )
        return None
