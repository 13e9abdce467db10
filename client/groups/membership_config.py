"""The group member's settings: Kafka's consumer settings of the same names, checked once.

``MembershipConfig`` is what the Consumer builds from its own arguments for
:class:`~.group_membership.GroupMembership` (docs/client.md, "Consumer groups (the membership
core)"). Every bound is checked at construction and refused with a ``ValueError`` naming the
setting; the member assumes them valid afterwards. Immutable (the assignor objects it holds keep
their own state: the cooperative-sticky assignor's last generation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .assignor import PartitionAssignor
from .cooperative_sticky_assignor import CooperativeStickyAssignor

__all__ = ["OFFSET_RESETS", "MembershipConfig", "check_topics"]

#: ``auto_offset_reset`` values, Kafka's names (as the Consumer's).
OFFSET_RESETS = ("earliest", "latest", "none")


@dataclass(frozen=True)
class MembershipConfig:
    """The member's settings, Kafka's consumer settings of the same names (``_ms`` last).

    ``assignors``: the protocols offered, most preferred first (default: cooperative-sticky
    only); the rebalance protocol is COOPERATIVE when every one supports it, else EAGER.

    ``held_heartbeats`` (ours, not Kafka's; docs/groups.md "Held heartbeats"): each Heartbeat
    asks the coordinator to hold it up to ``heartbeat_interval_ms`` and the next is sent as soon
    as it is answered, so a rebalance is learnt of in one round trip instead of at the next
    interval. False: Kafka's schedule, one Heartbeat answered at once every interval.
    """

    group_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int | None = None  # None: max_poll_interval_ms, as Kafka's
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    auto_offset_reset: str = "latest"
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    require_stable_offsets: bool = False  # read_committed consumers fetch stable offsets
    held_heartbeats: bool = True
    assignors: tuple[PartitionAssignor, ...] = field(
        default_factory=lambda: (CooperativeStickyAssignor(),)
    )

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be a non-empty string")
        check_topics(self.topics)
        if self.group_instance_id is not None and not self.group_instance_id:
            raise ValueError("group_instance_id must be None or a non-empty string")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms",
                     "auto_commit_interval_ms", "retry_backoff_ms", "retry_backoff_max_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.rebalance_timeout_ms is not None and self.rebalance_timeout_ms <= 0:
            raise ValueError(f"rebalance_timeout_ms must be > 0, got {self.rebalance_timeout_ms}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.auto_offset_reset not in OFFSET_RESETS:
            raise ValueError(
                f"auto_offset_reset must be one of {OFFSET_RESETS}, got {self.auto_offset_reset!r}"
            )
        names = [a.name for a in self.assignors]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"assignors must be non-empty with distinct names, got {names}")

    @property
    def rebalance_timeout(self) -> int:
        return self.max_poll_interval_ms if self.rebalance_timeout_ms is None else (
            self.rebalance_timeout_ms
        )




def check_topics(topics: Iterable[str]) -> None:
    """Refuse an empty subscription or an empty topic name (ValueError naming them)."""
    topics = tuple(topics)
    if not topics or not all(isinstance(t, str) and t for t in topics):
        raise ValueError(f"topics must be a non-empty sequence of topic names, got {topics!r}")
